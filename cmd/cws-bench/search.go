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

	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/sandbox/agent"
)

func init() {
	sections = append(sections, section{
		Name:  "search",
		Order: 50,
		Doc:   "search the Go toolchain's src (copied into the workspace): agent search vs rg in the same container",
		Run:   benchSearch,
	})
	for _, k := range searchKinds {
		ratios = append(ratios, ratio{Num: "agent search " + k.name, Den: "rg " + k.name, Target: 1.5, AtMost: true})
	}
}

// searchKinds are the searches compared, with the rg flags that mean the same thing
// (hidden files searched, .git and .gitignore'd paths skipped, one match per line).
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
	e.logf("copying %s into the workspace…", src)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarDir(pw, src)) }()
	up, err := b.Client.TarIn(ctx, agent.TarInArgs{Path: "gosrc"}, pr)
	if err != nil {
		return nil, fmt.Errorf("upload %s: %w", src, err)
	}
	e.logf("copied %d files, %d MiB", up.Files, up.Bytes>>20)
	n := e.iterations(10)
	var rows []bench.Row
	for _, k := range searchKinds {
		args := k.args
		args.Path, args.Hidden, args.MaxResults = "gosrc", true, 100000
		var agentHits, rgHits int
		e.logf("agent search %s ×%d…", k.name, n)
		samples, err := bench.Run(ctx, 2, n, func(ctx context.Context) error {
			r, err := b.Client.Search(ctx, args)
			agentHits = len(r.Matches)
			return err
		})
		if err != nil {
			return rows, err
		}
		row := bench.Summarize("agent search "+k.name, samples)
		row.Note = fmt.Sprintf("%d matches, %d files", agentHits, up.Files)
		rows = append(rows, row)

		argv := append([]string{"rg", "-n", "--column", "--hidden", "-g", "!.git", "--no-messages"}, k.rg...)
		argv = append(argv, ".")
		e.logf("rg %s ×%d…", k.name, n)
		samples, err = bench.Run(ctx, 2, n, func(ctx context.Context) error {
			r, err := b.Client.Exec(ctx, agent.ExecArgs{Argv: argv, Cwd: "gosrc", OutputCap: 4 << 20}, nil, nil)
			if err == nil && r.StartError != "" {
				err = fmt.Errorf("rg: %s", r.StartError)
			}
			rgHits = strings.Count(string(r.Stdout), "\n")
			return err
		})
		if err != nil {
			return rows, err
		}
		row = bench.Summarize("rg "+k.name, samples)
		row.Note = fmt.Sprintf("%d matches (rg %s, in the same container)", rgHits, strings.Join(k.rg, " "))
		rows = append(rows, row)
	}
	return rows, nil
}

// tarDir writes dir's regular files and directories as a tar stream.
func tarDir(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." || !(d.IsDir() || d.Type().IsRegular()) {
			return nil
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
