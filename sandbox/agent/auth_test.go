package agent_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server"
)

// authPair runs the host's and the agent's side of the secret handshake over a pipe.
func authPair(hostSecret, agentSecret string) (hostErr, agentErr error) {
	h, a := net.Pipe()
	done := make(chan error, 1)
	go func() {
		err := agent.AuthenticateHost(a, []byte(agentSecret))
		a.Close()
		done <- err
	}()
	hostErr = agent.AuthenticateAgent(h, []byte(hostSecret))
	h.Close()
	return hostErr, <-done
}

func TestSecretHandshake(t *testing.T) {
	t.Run("same secret", func(t *testing.T) {
		if h, a := authPair("s3cret", "s3cret"); h != nil || a != nil {
			t.Fatalf("host %v, agent %v", h, a)
		}
	})
	t.Run("different secrets", func(t *testing.T) {
		h, a := authPair("mine", "another session's")
		if !errors.Is(h, agent.ErrAuth) {
			t.Errorf("host: %v, want ErrAuth", h)
		}
		if a == nil {
			t.Error("agent accepted a host with another secret")
		}
	})
	t.Run("impostor agent learns no proof", func(t *testing.T) {
		// Something without the secret answers the host's challenge with a made-up
		// proof: the host refuses it and never sends its own proof.
		h, imp := net.Pipe()
		got := make(chan bool, 1)
		go func() {
			defer imp.Close()
			if _, _, err := agent.ReadFrame(imp); err != nil { // the host's challenge
				got <- false
				return
			}
			_ = agent.WriteHello(imp, agent.Hello{}) // not a valid answer
			_, _, err := agent.ReadFrame(imp)
			got <- err == nil // anything further from the host
		}()
		err := agent.AuthenticateAgent(h, []byte("s3cret"))
		h.Close()
		if !errors.Is(err, agent.ErrAuth) {
			t.Fatalf("host: %v, want ErrAuth", err)
		}
		if <-got {
			t.Fatal("the host sent more after a wrong answer")
		}
	})
	t.Run("host without the secret is not served", func(t *testing.T) {
		// On the agent's socket, a connection that skips the handshake (straight to the
		// Hello) is closed without an answer.
		dir := t.TempDir()
		srv, err := server.New(server.Config{Root: dir, Version: "test"})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		l, err := net.Listen("unix", filepath.Join(t.TempDir(), "agent.sock"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go srv.ServeSecret(l, []byte("s3cret"))
		conn, err := net.Dial("unix", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := agent.WriteHello(conn, agent.Hello{Protocol: agent.ProtocolVersion, Version: "test"}); err != nil {
			t.Fatal(err)
		}
		if h, err := agent.ReadHello(conn); err == nil && h.Protocol != 0 {
			t.Fatalf("served without the secret: %+v", h)
		}
	})
}

// countConn counts the writes made to a connection.
type countConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countConn) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}

// TestWritesPerCall: a small call is three frames each way (open, request or answer,
// close); none is split in two writes, and frames queued together share one write.
func TestWritesPerCall(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Root: dir, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var up, down atomic.Int64
	c := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) {
		h, a := net.Pipe()
		go srv.ServeConn(countConn{a, &down})
		return countConn{h, &up}, nil
	}, "test", nil)
	defer c.Close()
	ctx := ctxT(t)
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	const calls = 200
	up.Store(0)
	down.Store(0)
	for range calls {
		if _, _, err := c.ReadFile(ctx, agent.ReadArgs{Path: "f"}); err != nil {
			t.Fatal(err)
		}
	}
	// The last call's closing frames may still be on their way; count whole calls.
	perUp, perDown := float64(up.Load())/calls, float64(down.Load())/calls
	t.Logf("4 KiB read: %.2f writes host→agent, %.2f agent→host per call", perUp, perDown)
	if perUp > 3.05 || perDown > 3.05 {
		t.Errorf("writes per call: %.2f up, %.2f down; want at most 3 each (at most one per frame)", perUp, perDown)
	}
}
