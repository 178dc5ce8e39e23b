package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/yamux"

	"github.com/cwsdev/cws/sandbox/agent"
)

// crashedRequest makes the state an agent leaves when it dies inside a request: the
// request is marked as running, apply (the part of its work that was done) has run,
// and no outcome was recorded. It returns the request's id.
func crashedRequest(t *testing.T, state string, apply func()) string {
	t.Helper()
	id := newID(t)
	newOutcomes(state).begin(id) // the first agent marks it running, then dies
	if apply != nil {
		apply()
	}
	return id
}

func newID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// rawCall sends one request to a fresh agent over a real yamux stream and returns the
// done frame.
func rawCall(t *testing.T, srv *Server, req *agent.Header) *agent.Header {
	t.Helper()
	c, s := net.Pipe()
	cs, err := yamux.Client(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := yamux.Server(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	defer ss.Close()
	go func() {
		if st, err := ss.AcceptStream(); err == nil {
			srv.serveStream(st)
		}
	}()
	st, err := cs.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.WriteFrame(st, req, nil); err != nil {
		t.Fatal(err)
	}
	for {
		h, _, err := agent.ReadFrame(st)
		if err != nil {
			t.Fatal(err)
		}
		if h.Done {
			return h
		}
	}
}

// A request retried after the agent died inside it ("in doubt": marked running, no
// outcome) is settled by what the workspace shows: applied once, never twice, never
// reported as failed because its first run had done the work.
func TestInDoubtRequestsSettle(t *testing.T) {
	type tc struct {
		name    string
		files   []string // in the workspace before the crash
		op      string
		args    any
		applied func(root string) // what the dead agent had done; nil: nothing
		wantErr string            // "" for success
		check   func(t *testing.T, root string)
	}
	exists := func(t *testing.T, root, rel string, want bool) {
		t.Helper()
		_, err := os.Lstat(filepath.Join(root, rel))
		if got := err == nil; got != want {
			t.Errorf("%s exists = %v, want %v", rel, got, want)
		}
	}
	cases := []tc{
		{
			name: "rename applied before the crash", files: []string{"a"}, op: agent.OpRename,
			args:    agent.RenameArgs{From: "a", To: "b"},
			applied: func(root string) { must(t, os.Rename(filepath.Join(root, "a"), filepath.Join(root, "b"))) },
			check:   func(t *testing.T, root string) { exists(t, root, "a", false); exists(t, root, "b", true) },
		},
		{
			name: "rename not applied before the crash", files: []string{"a"}, op: agent.OpRename,
			args:  agent.RenameArgs{From: "a", To: "b"},
			check: func(t *testing.T, root string) { exists(t, root, "a", false); exists(t, root, "b", true) },
		},
		{
			name: "rename whose source and destination are both missing", op: agent.OpRename,
			args: agent.RenameArgs{From: "a", To: "b"}, wantErr: agent.CodeNotFound,
		},
		{
			name: "rename of a dangling link applied before the crash", op: agent.OpRename,
			args:    agent.RenameArgs{From: "a", To: "b"},
			applied: func(root string) { must(t, os.Symlink("nowhere", filepath.Join(root, "b"))) },
			check:   func(t *testing.T, root string) { exists(t, root, "b", true) },
		},
		{
			name: "remove applied before the crash", files: []string{"a"}, op: agent.OpRemove,
			args:    agent.RemoveArgs{Path: "a"},
			applied: func(root string) { must(t, os.Remove(filepath.Join(root, "a"))) },
			check:   func(t *testing.T, root string) { exists(t, root, "a", false) },
		},
		{
			name: "remove not applied before the crash", files: []string{"a", "keep"}, op: agent.OpRemove,
			args:  agent.RemoveArgs{Path: "a"},
			check: func(t *testing.T, root string) { exists(t, root, "a", false); exists(t, root, "keep", true) },
		},
		{
			name: "mkdir applied before the crash", op: agent.OpMkdir,
			args:    agent.MkdirArgs{Path: "d/e"},
			applied: func(root string) { must(t, os.MkdirAll(filepath.Join(root, "d/e"), 0o755)) },
			check:   func(t *testing.T, root string) { exists(t, root, "d/e", true) },
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			state, root := t.TempDir(), t.TempDir()
			for _, f := range c.files {
				must(t, os.WriteFile(filepath.Join(root, f), []byte(f), 0o644))
			}
			id := crashedRequest(t, state, func() {
				if c.applied != nil {
					c.applied(root)
				}
			})
			srv, err := New(Config{Root: root, Version: "test", StateDir: state})
			must(t, err)
			defer srv.Close()
			args, _ := json.Marshal(c.args)
			h := rawCall(t, srv, &agent.Header{Op: c.op, Args: args, ID: id})
			switch {
			case c.wantErr == "" && h.Error != nil:
				t.Fatalf("%s in doubt = %v, want success", c.op, h.Error)
			case c.wantErr != "" && (h.Error == nil || h.Error.Code != c.wantErr):
				t.Fatalf("%s in doubt = %+v, want %s", c.op, h.Error, c.wantErr)
			}
			if c.check != nil {
				c.check(t, root)
			}
			// The settled outcome is now recorded: asked again, the same answer.
			again := rawCall(t, srv, &agent.Header{Op: c.op, Args: args, ID: id})
			if (again.Error == nil) != (h.Error == nil) || (h.Error != nil && again.Error.Code != h.Error.Code) || string(again.Result) != string(h.Result) {
				t.Errorf("asked again: %+v %s, first answer %+v %s", again.Error, again.Result, h.Error, h.Result)
			}
		})
	}

	// Without the mark, a missing source is simply not found: settling only ever
	// applies to a request an agent started.
	t.Run("no mark", func(t *testing.T) {
		root := t.TempDir()
		must(t, os.WriteFile(filepath.Join(root, "b"), nil, 0o644))
		srv, err := New(Config{Root: root, Version: "test", StateDir: t.TempDir()})
		must(t, err)
		defer srv.Close()
		args, _ := json.Marshal(agent.RenameArgs{From: "a", To: "b", Overwrite: true})
		if h := rawCall(t, srv, &agent.Header{Op: agent.OpRename, Args: args, ID: newID(t)}); h.Error == nil || h.Error.Code != agent.CodeNotFound {
			t.Fatalf("rename of a missing source = %+v, want not_found", h.Error)
		}
	})
}
