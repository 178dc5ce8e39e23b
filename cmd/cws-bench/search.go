package main

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/sandbox/agent"
)

func init() {
	sections = append(sections, section{
		Name:  "search",
		Order: 50,
		Doc:   "search the Go toolchain's src (copied into the workspace), and a 2,000-file part of it: agent search vs rg in the same container",
		Run:   benchSearch,
	})
	for _, tr := range searchTrees {
		for _, k := range searchKinds {
			name := k.name + tr.suffix
			ratios = append(ratios, ratio{Num: "agent search " + name, Den: "rg " + name, Target: 1.0, AtMost: true})
			goals = append(goals, goal{Order: 40, Figure: "searchFiles " + name, Row: "agent search " + name, Anchor: "rg " + name, Slower: 1})
		}
	}
}

// searchTrees are the trees searched: the whole of GOROOT/src, and its first smallFiles
// files with a project's usual .gitignore at the top, where the cost of starting rg
// weighs more.
var searchTrees = []struct {
	dir, suffix string
	files       int    // 0: all
	gitignore   string // written at the top of the tree when set
}{
	{"gosrc", "", 0, ""},
	{"gosrc-small", " (2,000 files)", smallFiles, projectGitignore},
}

// projectGitignore is a .gitignore like many projects have (GitHub's Go and Node
// templates, shortened): it costs a search a match of every path against every line.
const projectGitignore = `# Binaries
*.exe
*.exe~
*.dll
*.so
*.dylib
*.test
*.out
go.work
go.work.sum
vendor/
# Logs
logs
*.log
npm-debug.log*
yarn-debug.log*
yarn-error.log*
report.[0-9]*.[0-9]*.[0-9]*.[0-9]*.json
pids
*.pid
*.seed
*.pid.lock
coverage
*.lcov
.nyc_output
bower_components
build/Release
node_modules/
jspm_packages/
*.tsbuildinfo
.npm
.eslintcache
*.tgz
.env
.env.*.local
.cache
.parcel-cache
.next
out
dist
.idea/
.vscode/
*.swp
.DS_Store
`

const smallFiles = 2000

// searchKinds are the searches compared, with the rg flags that mean the same thing
// (hidden files searched, .git and .gitignore'd paths skipped even outside a git
// repository, one match per line).
var searchKinds = []struct {
	name string
	args agent.SearchArgs
	rg   []string
}{
	{"literal", agent.SearchArgs{Query: "func main(", CaseSensitive: true}, []string{"-F", "-s", "func main("}},
	{"literal -i", agent.SearchArgs{Query: "func main("}, []string{"-F", "-i", "func main("}},
	{"regex", agent.SearchArgs{Query: `func [A-Z][a-z]+Error\(`, Regex: true, CaseSensitive: true}, []string{"-s", `func [A-Z][a-z]+Error\(`}},
}

func benchSearch(ctx context.Context, e *env) ([]bench.Row, error) {
	b, err := e.sandbox(ctx)
	if err != nil {
		return nil, err
	}
	src := filepath.Join(runtime.GOROOT(), "src")
	n := e.iterations(10)
	var rows []bench.Row
	for _, tr := range searchTrees {
		e.logf("copying %s into the workspace as %s…", src, tr.dir)
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tarDir(pw, src, tr.files)) }()
		up, err := b.Client.TarIn(ctx, agent.TarInArgs{Path: tr.dir}, pr)
		if err != nil {
			return rows, fmt.Errorf("upload %s: %w", src, err)
		}
		e.logf("copied %d files, %d MiB", up.Files, up.Bytes>>20)
		if tr.gitignore != "" {
			if _, err := b.Client.WriteFile(ctx, agent.WriteArgs{Path: tr.dir + "/.gitignore", Create: true}, []byte(tr.gitignore)); err != nil {
				return rows, fmt.Errorf("write .gitignore: %w", err)
			}
		}
		for _, k := range searchKinds {
			args := k.args
			args.Path, args.Hidden, args.MaxResults = tr.dir, true, 100000
			argv := append([]string{"rg", "-n", "--column", "--hidden", "--no-require-git", "-g", "!.git", "--no-messages"}, k.rg...)
			argv = append(argv, ".")
			var agentHits, rgHits int
			e.logf("agent search and rg %s%s ×%d, in turns…", k.name, tr.suffix, n)
			// In turns, so that both see the same load on a shared machine.
			mine, theirs, err := inTurns(ctx, n, func(ctx context.Context) error {
				r, err := b.Client.Search(ctx, args)
				agentHits = len(r.Matches)
				return err
			}, func(ctx context.Context) error {
				r, err := b.Client.Exec(ctx, agent.ExecArgs{Argv: argv, Cwd: tr.dir, OutputCap: 4 << 20}, nil, nil)
				if err == nil && r.StartError != "" {
					err = fmt.Errorf("rg: %s", r.StartError)
				}
				rgHits = strings.Count(string(r.Stdout), "\n")
				return err
			})
			if err != nil {
				return rows, err
			}
			row := bench.Summarize("agent search "+k.name+tr.suffix, mine)
			row.Note = fmt.Sprintf("%d matches, %d files", agentHits, up.Files)
			rows = append(rows, row)
			row = bench.Summarize("rg "+k.name+tr.suffix, theirs)
			row.Note = fmt.Sprintf("%d matches (rg %s, in the same container)", rgHits, strings.Join(k.rg, " "))
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// inTurns times a and b n times each, one after the other, after two warm-up rounds.
func inTurns(ctx context.Context, n int, a, b func(context.Context) error) (as, bs []time.Duration, err error) {
	for range 2 {
		if err := a(ctx); err != nil {
			return nil, nil, fmt.Errorf("warm-up: %w", err)
		}
		if err := b(ctx); err != nil {
			return nil, nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	for range n {
		da, err := bench.Run(ctx, 0, 1, a)
		if err != nil {
			return nil, nil, err
		}
		db, err := bench.Run(ctx, 0, 1, b)
		if err != nil {
			return nil, nil, err
		}
		as, bs = append(as, da...), append(bs, db...)
	}
	return as, bs, nil
}

// tarDir writes dir's regular files and directories as a tar stream: the first max
// files in walk order (0: all).
func tarDir(w io.Writer, dir string, max int) error {
	tw := tar.NewWriter(w)
	files := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." || !(d.IsDir() || d.Type().IsRegular()) {
			return nil
		}
		if !d.IsDir() {
			if files++; max > 0 && files > max {
				return fs.SkipAll
			}
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
