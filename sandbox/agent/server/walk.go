package server

import (
	"context"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/cwsdev/cws/sandbox/agent"
	ignore "github.com/sabhiram/go-gitignore"
)

// ignoreRules are the .gitignore files in force in one directory: its own and its
// ancestors', each matching paths relative to the directory it sits in.
type ignoreRules []ignoreFile

type ignoreFile struct {
	base string // workspace-relative directory of the .gitignore ("" for the root)
	gi   *ignore.GitIgnore
}

func (r ignoreRules) ignored(rel string, isDir bool) bool {
	ig := false
	for _, f := range r {
		p := rel
		if f.base != "" {
			p = strings.TrimPrefix(rel, f.base+"/")
		}
		if isDir {
			p += "/"
		}
		if f.gi.MatchesPath(p) {
			ig = true
		}
	}
	return ig
}

// walkFiles sends the regular files beneath t that a search should read: never .git,
// symlinks are not followed, .gitignore'd and guard-denied paths are skipped, dot-files
// only with a.Hidden, and only those matching a.Globs when set.
func (s *Server) walkFiles(ctx context.Context, t target, a *agent.SearchArgs, out chan<- walkedFile) error {
	fi, err := s.ws.root.Stat(t.real)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		out <- walkedFile{rel: t.rel, real: t.real, size: fi.Size()}
		return nil
	}
	var rules ignoreRules
	if !a.NoIgnore {
		// .gitignore files above the start directory count too.
		dir := t.real
		var chain []string
		for dir != "." {
			dir = path.Dir(dir)
			chain = append([]string{dir}, chain...)
		}
		for _, d := range chain {
			rules = s.loadIgnore(rules, d)
		}
	}
	return s.walkDir(ctx, t.real, t.rel, rules, a, out)
}

func (s *Server) loadIgnore(rules ignoreRules, realDir string) ignoreRules {
	data, err := s.ws.root.ReadFile(path.Join(realDir, ".gitignore"))
	if err != nil {
		return rules
	}
	base := realDir
	if base == "." {
		base = ""
	}
	gi := ignore.CompileIgnoreLines(strings.Split(string(data), "\n")...)
	return append(rules[:len(rules):len(rules)], ignoreFile{base: base, gi: gi})
}

func (s *Server) walkDir(ctx context.Context, real, rel string, rules ignoreRules, a *agent.SearchArgs, out chan<- walkedFile) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !a.NoIgnore {
		rules = s.loadIgnore(rules, real)
	}
	d, err := s.ws.root.Open(real)
	if err != nil {
		return nil // unreadable directories are skipped, as grep -r does
	}
	ents, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return nil
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, e := range ents {
		name := e.Name()
		if name == ".git" || (!a.Hidden && strings.HasPrefix(name, ".")) {
			continue
		}
		childReal, childRel := path.Join(real, name), path.Join(rel, name)
		typ := e.Type()
		if typ&fs.ModeSymlink != 0 || (!typ.IsDir() && !typ.IsRegular()) {
			continue
		}
		if len(rules) > 0 && rules.ignored(childReal, typ.IsDir()) {
			continue
		}
		if a.Guard != nil && (a.Guard.Check(childRel) != nil || a.Guard.Check(childReal) != nil) {
			continue
		}
		if typ.IsDir() {
			if err := s.walkDir(ctx, childReal, childRel, rules, a, out); err != nil {
				return err
			}
			continue
		}
		if !matchAnySearch(a.Globs, childRel) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		select {
		case out <- walkedFile{rel: childRel, real: childReal, size: info.Size()}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// matchAnySearch matches search globs against the path and, for bare patterns like
// "*.go", against the file name, as rg -g does.
func matchAnySearch(globs []string, rel string) bool {
	if len(globs) == 0 {
		return true
	}
	base := path.Base(rel)
	for _, g := range globs {
		if ok, _ := doublestar.Match(g, rel); ok {
			return true
		}
		if !strings.Contains(g, "/") {
			if ok, _ := doublestar.Match(g, base); ok {
				return true
			}
		}
	}
	return false
}
