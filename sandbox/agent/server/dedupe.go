package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
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

// stored is an outcome as persisted.
type stored struct {
	Header *agent.Header `json:"h"`
	Body   []byte        `json:"b,omitempty"`
}

func newOutcomes(dir string) *outcomes {
	o := &outcomes{dir: dir, m: map[string]*outcome{}}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			o.dir = ""
		} else {
			o.sweep()
		}
	}
	return o
}

// begin returns the outcome slot of id and whether this request is the first with it
// (then the caller runs it and calls finish).
func (o *outcomes) begin(id string) (*outcome, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if oc, ok := o.m[id]; ok {
		return oc, false
	}
	oc := &outcome{done: make(chan struct{})}
	if st, ok := o.load(id); ok {
		oc.h, oc.body = st.Header, st.Body
		close(oc.done)
		o.m[id] = oc
		o.order = append(o.order, id)
		return oc, false
	}
	o.m[id] = oc
	o.order = append(o.order, id)
	for len(o.order) > outcomesKept {
		old := o.order[0]
		o.order = o.order[1:]
		delete(o.m, old)
		if o.dir != "" {
			_ = os.Remove(filepath.Join(o.dir, old))
		}
	}
	return oc, true
}

// finish records the first request's answer and releases its duplicates. An answer
// that says the request was canceled is forgotten: a retry must run it.
func (o *outcomes) finish(id string, oc *outcome, h *agent.Header, body []byte) {
	oc.h, oc.body = h, body
	if h.Error != nil && h.Error.Code == agent.CodeCanceled {
		o.mu.Lock()
		delete(o.m, id)
		o.mu.Unlock()
	} else if o.dir != "" {
		if b, err := json.Marshal(stored{Header: h, Body: body}); err == nil {
			tmp := filepath.Join(o.dir, "."+id)
			if os.WriteFile(tmp, b, 0o600) == nil {
				_ = os.Rename(tmp, filepath.Join(o.dir, id))
			}
		}
	}
	close(oc.done)
}

func (o *outcomes) load(id string) (stored, bool) {
	var st stored
	if o.dir == "" || !validID(id) {
		return st, false
	}
	b, err := os.ReadFile(filepath.Join(o.dir, id))
	if err != nil || json.Unmarshal(b, &st) != nil || st.Header == nil {
		return st, false
	}
	return st, true
}

// sweep deletes persisted outcomes older than outcomesMaxAge.
func (o *outcomes) sweep() {
	ents, err := os.ReadDir(o.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > outcomesMaxAge {
			_ = os.Remove(filepath.Join(o.dir, e.Name()))
		}
	}
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
