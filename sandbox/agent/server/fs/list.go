package fs

import (
	"context"
	"encoding/json"
	"io/fs"
	"path"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
	"golang.org/x/sys/unix"
)

// DefaultMaxEntries bounds a listing when the caller sets no limit (ListArgs.MaxEntries).
const DefaultMaxEntries = 10000

// List lists a directory, recursively if asked (agent.ListArgs).
func (h *Handlers) List(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.ListArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	for _, g := range a.Globs {
		if !doublestar.ValidatePattern(g) {
			return nil, agent.Errorf(agent.CodeInvalid, "", "invalid glob %q", g)
		}
	}
	if a.MaxEntries <= 0 {
		a.MaxEntries = DefaultMaxEntries
	}
	t, d, err := h.WS.OpenChecked(a.Path, a.Guard, false, unix.O_PATH, 0)
	if err != nil {
		return nil, err
	}
	fi, err := d.Stat()
	d.Close()
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, agent.Errorf(agent.CodeNotDir, t.Rel, "not a directory")
	}
	l := &lister{h: h, a: &a, b: op.NewBudget(), res: agent.ListResult{Entries: []agent.FileInfo{}}}
	if err := l.walk(ctx, t.Real, t.Rel); err != nil {
		return nil, err
	}
	return l.res, nil
}

// lister is one listing: the entries it keeps, and the ones it counts once full.
type lister struct {
	h       *Handlers
	a       *agent.ListArgs
	b       *op.Budget
	res     agent.ListResult
	counted int // entries looked at since the listing was full
}

// entryJSON is an entry's encoded size beside its strings: the field names, the type and
// the longest size, mode and mtime (RFC 3339 with nanoseconds and an offset).
const entryJSON = 160

// walk lists the real directory, reporting paths as the caller spelled the directory
// (rel). Once the listing is full (MaxEntries, or the answer's budget), it goes on
// counting what matches, without stat calls, for agent.MaxCounted more entries.
func (l *lister) walk(ctx context.Context, real, rel string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ents, err := l.h.WS.ReadDir(real)
	if err != nil {
		return err
	}
	a := l.a
	for _, e := range ents {
		if l.res.Truncated {
			if l.counted++; l.counted >= agent.MaxCounted {
				return nil
			}
		}
		childReal, childRel := path.Join(real, e.Name()), path.Join(rel, e.Name())
		if IsStaging(childReal) {
			continue // an upload in progress
		}
		if a.Guard != nil && (a.Guard.Check(childRel) != nil || a.Guard.Check(childReal) != nil) {
			continue // denied entries are not listed
		}
		if (!a.NoDirs || !e.IsDir()) && matchAny(a.Globs, childRel) {
			l.add(e, childReal, childRel)
		}
		if a.Recursive && e.IsDir() {
			if err := l.walk(ctx, childReal, childRel); err != nil {
				return err
			}
		}
	}
	return nil
}

// add lists one matching entry, or counts it as left out once the listing is full.
func (l *lister) add(e fs.DirEntry, childReal, childRel string) {
	if l.res.Truncated {
		l.res.Omitted++
		return
	}
	info, err := e.Info()
	if err != nil {
		return // vanished while listing
	}
	fe := FileInfo(childRel, info)
	if fe.Type == agent.TypeSymlink {
		fe.Target, _ = l.h.WS.root.Readlink(childReal)
	}
	if len(l.res.Entries) >= l.a.MaxEntries || !l.b.Take(entryJSON+op.JSONLen(fe.Name)+op.JSONLen(fe.Path)+op.JSONLen(fe.Target)) {
		l.res.Truncated = true
		l.res.Omitted++
		return
	}
	l.res.Entries = append(l.res.Entries, fe)
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
