package server

import (
	"encoding/json"
	"errors"
	iofs "io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/ident"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
)

// outcomesKept is how many recent request outcomes the agent remembers: far more than
// the calls in flight on one stream, so a retry after a broken stream always finds its
// first outcome.
const outcomesKept = 4096

// outcomesMaxAge is how long a persisted outcome survives an agent restart.
const outcomesMaxAge = 10 * time.Minute

// outcomes remembers the answers to recent requests that carried an id, so that a
// request retried on a fresh stream is answered with its first outcome instead of
// being applied twice. A duplicate that arrives while the first is still running waits
// for it. With a directory (on the container's /tmp, which outlives an agent process
// killed and restarted by init), outcomes also survive the agent itself.
//
// An agent can die between applying a request and recording its outcome. So a request
// is marked as running on disk before it is applied: a retry that finds the mark but
// no outcome is "in doubt" (the first run may or may not have applied it), and the
// server settles it by what the workspace shows (see settle).
type outcomes struct {
	dir string // "" keeps outcomes in memory only

	mu    sync.Mutex
	m     map[string]*outcome
	order []string // ids, oldest first
}

type outcome struct {
	done chan struct{}
	h    *agent.Header // the done frame
	body []byte
}

// stored is an outcome as persisted, or the mark of a request still running.
type stored struct {
	Header  *agent.Header `json:"h,omitempty"`
	Body    []byte        `json:"b,omitempty"`
	Running bool          `json:"running,omitempty"`
}

// runningMark is the file content that marks a request as running.
var runningMark = []byte(`{"running":true}`)

func newOutcomes(dir string) *outcomes {
	o := &outcomes{dir: dir, m: map[string]*outcome{}}
	if dir != "" {
		if err := ident.Private(func() error { return os.MkdirAll(dir, 0o700) }); err != nil {
			o.dir = ""
		} else {
			o.sweep()
		}
	}
	return o
}

// begin returns the outcome slot of id and whether this request is the first with it
// (then the caller runs it and calls finish). inDoubt says that an agent before this
// one started the request and died before recording how it ended.
func (o *outcomes) begin(id string) (oc *outcome, first, inDoubt bool) {
	o.mu.Lock()
	if oc, ok := o.m[id]; ok {
		o.mu.Unlock()
		return oc, false, false
	}
	oc = &outcome{done: make(chan struct{})}
	st, found := o.load(id)
	if found && !st.Running {
		oc.h, oc.body = st.Header, st.Body
		close(oc.done)
	}
	o.m[id] = oc
	o.order = append(o.order, id)
	for len(o.order) > outcomesKept {
		old := o.order[0]
		o.order = o.order[1:]
		delete(o.m, old)
		if o.dir != "" {
			private(func() error { return os.Remove(filepath.Join(o.dir, old)) })
		}
	}
	o.mu.Unlock()
	if found && !st.Running {
		return oc, false, false
	}
	if o.dir != "" && validID(id) {
		// Written before the caller applies the request, outside the lock (a duplicate
		// of id finds its slot in the map meanwhile). Not atomic on purpose: a torn
		// mark reads as no mark, and then the request had provably not been applied.
		private(func() error { return os.WriteFile(filepath.Join(o.dir, id), runningMark, 0o600) })
	}
	return oc, true, found
}

// finish records the first request's answer and releases its duplicates. An answer
// that says the request was canceled is forgotten: a retry must run it.
func (o *outcomes) finish(id string, oc *outcome, h *agent.Header, body []byte) {
	oc.h, oc.body = h, body
	if h.Error != nil && h.Error.Code == agent.CodeCanceled {
		// The mark goes before the slot: a retry must find neither or both gone.
		o.mu.Lock()
		if o.dir != "" && validID(id) {
			private(func() error { return os.Remove(filepath.Join(o.dir, id)) })
		}
		delete(o.m, id)
		o.mu.Unlock()
	} else if o.dir != "" {
		if b, err := json.Marshal(stored{Header: h, Body: body}); err == nil {
			tmp := filepath.Join(o.dir, "."+id)
			private(func() error {
				if err := os.WriteFile(tmp, b, 0o600); err != nil {
					return err
				}
				return os.Rename(tmp, filepath.Join(o.dir, id))
			})
		}
	}
	close(oc.done)
}

func (o *outcomes) load(id string) (stored, bool) {
	var st stored
	if o.dir == "" || !validID(id) {
		return st, false
	}
	var b []byte
	err := ident.Private(func() (err error) {
		b, err = os.ReadFile(filepath.Join(o.dir, id))
		return err
	})
	if err != nil || json.Unmarshal(b, &st) != nil || (st.Header == nil && !st.Running) {
		return st, false
	}
	return st, true
}

// sweep deletes persisted outcomes older than outcomesMaxAge.
func (o *outcomes) sweep() {
	private(func() error {
		ents, err := os.ReadDir(o.dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > outcomesMaxAge {
				_ = os.Remove(filepath.Join(o.dir, e.Name()))
			}
		}
		return nil
	})
}

// validID keeps request ids to plain file names.
func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// settle answers a request in doubt (see outcomes) whose second run failed. Writes and
// mkdir are idempotent and need nothing. A remove that finds nothing, and a rename that
// finds its source gone and its destination there, were applied by the first run and
// succeed. The wrong answers left, both for a call during which the agent died: a
// remove of a path that never existed, and a rename whose source never existed while
// its destination did, report success. Anything else keeps its error.
func (s *Server) settle(h *agent.Header, res any, err error) (any, error) {
	if !errors.Is(err, iofs.ErrNotExist) {
		return res, err
	}
	switch h.Op {
	case agent.OpRemove:
		s.log.Info("request in doubt settled: already removed", "op", h.Op)
		return nil, nil
	case agent.OpRename:
		var a agent.RenameArgs
		if json.Unmarshal(h.Args, &a) != nil {
			return res, err
		}
		// The destination as rename reports it: the entry itself, a link not followed.
		to, terr := s.ws.Entry(a.To, a.Guard)
		if terr != nil {
			return res, err
		}
		dir, base, terr := s.ws.OpenParent(to, false)
		if terr != nil {
			return res, err
		}
		defer dir.Close()
		fi, terr := os.Lstat(fs.FDPath(dir) + "/" + base)
		if terr != nil {
			return res, err
		}
		s.log.Info("request in doubt settled: already renamed", "op", h.Op)
		return fs.FileInfo(to.Rel, fi), nil
	}
	return res, err
}

// private runs fn with the agent's own fs identity: the outcomes live in the agent's
// state directory, which the tool user cannot enter (package ident). Its error is
// dropped, as every outcome write is best effort.
func private(fn func() error) { _ = ident.Private(fn) }
