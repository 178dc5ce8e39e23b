package server

import (
	"context"
	"encoding/json"
	"path"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/cwsdev/cws/sandbox/agent"
	"golang.org/x/sys/unix"
)

// defaultMaxEntries bounds a listing when the caller sets no limit.
const defaultMaxEntries = 10000

func (s *Server) list(ctx context.Context, args json.RawMessage, _ []byte, _ *responder) (any, error) {
	var a agent.ListArgs
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	for _, g := range a.Globs {
		if !doublestar.ValidatePattern(g) {
			return nil, agent.Errorf(agent.CodeInvalid, "", "invalid glob %q", g)
		}
	}
	if a.MaxEntries <= 0 {
		a.MaxEntries = defaultMaxEntries
	}
	t, d, err := s.ws.openChecked(a.Path, a.Guard, false, unix.O_PATH, 0)
	if err != nil {
		return nil, err
	}
	fi, err := d.Stat()
	d.Close()
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, agent.Errorf(agent.CodeNotDir, t.rel, "not a directory")
	}
	res := agent.ListResult{Entries: []agent.FileInfo{}}
	// Walk the real tree, report paths as the caller spelled the directory.
	var walk func(real, rel string) error
	walk = func(real, rel string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		ents, err := s.ws.readDir(real)
		if err != nil {
			return err
		}
		for _, e := range ents {
			childReal, childRel := path.Join(real, e.Name()), path.Join(rel, e.Name())
			if isStaging(childReal) {
				continue // an upload in progress
			}
			if a.Guard != nil && (a.Guard.Check(childRel) != nil || a.Guard.Check(childReal) != nil) {
				continue // denied entries are not listed
			}
			if matchAny(a.Globs, childRel) {
				if len(res.Entries) >= a.MaxEntries {
					res.Truncated = true
					return nil
				}
				info, err := e.Info()
				if err != nil {
					continue // vanished while listing
				}
				fe := fileInfo(childRel, info)
				if fe.Type == agent.TypeSymlink {
					fe.Target, _ = s.ws.root.Readlink(childReal)
				}
				res.Entries = append(res.Entries, fe)
			}
			if a.Recursive && e.IsDir() {
				if err := walk(childReal, childRel); err != nil {
					return err
				}
				if res.Truncated {
					return nil
				}
			}
		}
		return nil
	}
	if err := walk(t.real, t.rel); err != nil {
		return nil, err
	}
	return res, nil
}

// matchAny reports whether rel matches any glob; no globs match everything.
func matchAny(globs []string, rel string) bool {
	if len(globs) == 0 {
		return true
	}
	for _, g := range globs {
		if ok, _ := doublestar.Match(g, rel); ok {
			return true
		}
	}
	return false
}
