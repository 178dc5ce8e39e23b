package agent_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server"
)

// lossyConn loses the answer of the next call when armed: the next read that brings
// bytes (the agent applied the request and answered) drops them and breaks the
// connection, however the answer's frames were grouped into writes.
type lossyConn struct {
	net.Conn
	armed *bool
	mu    *sync.Mutex
}

func (c lossyConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	armed := *c.armed && n > 0
	if armed {
		*c.armed = false
	}
	c.mu.Unlock()
	if armed {
		c.Conn.Close()
		return 0, io.ErrClosedPipe
	}
	return n, err
}

// lossyAgent is pipeAgent whose arm func makes the next answer get lost with its stream.
func lossyAgent(t *testing.T, stateDir string) (*agent.Client, string, func()) {
	t.Helper()
	dir := t.TempDir()
	srv, err := server.New(server.Config{Root: dir, Version: "test", StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	armed := false
	dial := func(ctx context.Context) (io.ReadWriteCloser, error) {
		c, s := net.Pipe()
		go srv.ServeConn(s)
		return lossyConn{Conn: c, armed: &armed, mu: &mu}, nil
	}
	c := agent.NewClient(dial, "test", nil)
	must(t, err)
	t.Cleanup(func() { c.Close(); srv.Close() })
	// Connect first, so that arming hits the call's answer, not the handshake.
	if _, err := c.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return c, dir, func() { mu.Lock(); armed = true; mu.Unlock() }
}

// A rename whose answer is lost with its stream is retried on a fresh one and applied
// exactly once: the retry gets the first outcome, not "not found".
func TestRetriedChangesApplyOnce(t *testing.T) {
	c, dir, lose := lossyAgent(t, "")
	ctx := ctxT(t)
	must(t, os.WriteFile(filepath.Join(dir, "f0"), []byte("x"), 0o644))
	for i := range 5 {
		from, to := "f"+string(rune('0'+i)), "f"+string(rune('1'+i))
		lose()
		if _, err := c.Rename(ctx, agent.RenameArgs{From: from, To: to}); err != nil {
			t.Fatalf("rename %s→%s with its answer lost: %v", from, to, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "f5")); err != nil {
		t.Fatalf("after 5 renames: %v", err)
	}
	lose()
	if _, err := c.Mkdir(ctx, agent.MkdirArgs{Path: "d"}); err != nil {
		t.Fatalf("mkdir with its answer lost: %v", err)
	}
	lose()
	if err := c.Remove(ctx, agent.RemoveArgs{Path: "f5"}); err != nil {
		t.Fatalf("remove with its answer lost: %v", err)
	}
	lose()
	if _, err := c.WriteFile(ctx, agent.WriteArgs{Path: "w.txt", Create: true, Atomic: true}, []byte("once")); err != nil {
		t.Fatalf("write with its answer lost: %v", err)
	}
}

// Outcomes kept in a state directory survive the agent: a new agent process answers a
// retried request with the first process's outcome.
func TestOutcomesSurviveRestart(t *testing.T) {
	state, root := t.TempDir(), t.TempDir()
	must(t, os.WriteFile(filepath.Join(root, "a"), []byte("x"), 0o644))
	req := &agent.Header{Op: agent.OpRename, Args: []byte(`{"from":"a","to":"b"}`), ID: "0123456789abcdef0123456789abcdef"}
	for i := range 2 { // two agent processes, one request id
		srv, err := server.New(server.Config{Root: root, Version: "test", StateDir: state})
		must(t, err)
		var h *agent.Header
		dial := func(ctx context.Context) (io.ReadWriteCloser, error) {
			c, s := net.Pipe()
			go srv.ServeConn(s)
			return c, nil
		}
		cl := agent.NewClient(dial, "test", nil)
		h, err = agent.RawCall(ctxT(t), cl, req)
		cl.Close()
		srv.Close()
		if err != nil || h.Error != nil {
			t.Fatalf("agent %d: rename a→b = %+v %v, want the first outcome (success)", i, h, err)
		}
	}
}

// A command whose stream breaks is not run again, and says that it had started.
func TestInterruptedCommand(t *testing.T) {
	c, _, breakIt := pipeAgent(t)
	ctx := ctxT(t)
	go func() { time.Sleep(500 * time.Millisecond); breakIt() }()
	_, err := c.Exec(ctx, agent.ExecArgs{Argv: []string{"sleep", "5"}}, nil, nil)
	var ie *agent.InterruptedError
	if !errors.As(err, &ie) || !ie.Started || !errors.Is(err, agent.ErrUnavailable) {
		t.Fatalf("exec with a broken stream = %v, want an InterruptedError that started", err)
	}
}
