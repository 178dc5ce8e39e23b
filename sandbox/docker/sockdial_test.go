package docker

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server"
)

// serveAgentSocket serves an in-process agent with secret on a unix socket at path.
func serveAgentSocket(t *testing.T, path, secret string) {
	t.Helper()
	srv, err := server.New(server.Config{Root: t.TempDir(), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeSecret(l, []byte(secret))
	t.Cleanup(func() { l.Close(); srv.Close() })
}

// canary is a listening host socket that records whether anyone connected to it: what
// /var/run/docker.sock would be to a planted link.
type canary struct {
	path string
	hit  chan struct{}
}

func newCanary(t *testing.T) *canary {
	t.Helper()
	c := &canary{path: filepath.Join(t.TempDir(), "docker.sock"), hit: make(chan struct{}, 16)}
	l, err := net.Listen("unix", c.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.hit <- struct{}{}
			conn.Close()
		}
	}()
	return c
}

// connected reports whether anything connected to the canary. Connections are accepted
// as they come; the listener's backlog holds any that raced this check, so a short
// look after the dial has returned is exact enough: the dial has already happened.
func (c *canary) connected() bool {
	select {
	case <-c.hit:
		return true
	case <-time.After(100 * time.Millisecond):
		return false
	}
}

func newKey(t *testing.T) string {
	t.Helper()
	d := &Driver{socketDir: t.TempDir()}
	ss, err := d.newSocketDir("")
	if err != nil {
		t.Fatal(err)
	}
	return ss.key
}

// TestDialAgentSocket plants, at the agent's socket name, everything an agent that
// turned hostile could put in its socket directory, and checks that cws connects only
// to a real socket that proves the container's secret.
func TestDialAgentSocket(t *testing.T) {
	const secret, otherSecret = "secret-of-this-container", "secret-of-another-session"
	sockets := t.TempDir() // cws's own socket dir
	other := filepath.Join(t.TempDir(), "other-agent.sock")
	serveAgentSocket(t, other, otherSecret)
	dog := newCanary(t)

	tests := []struct {
		name    string
		plant   func(t *testing.T, dir string) // makes dir/agent.sock
		wantErr error                          // nil: the dial and the Hello succeed
	}{
		{"the agent's socket", func(t *testing.T, dir string) {
			serveAgentSocket(t, filepath.Join(dir, agent.SocketName), secret)
		}, nil},
		{"a socket that does not know the secret", func(t *testing.T, dir string) {
			serveAgentSocket(t, filepath.Join(dir, agent.SocketName), otherSecret)
		}, agent.ErrAuth},
		{"symlink to a listening host socket (docker.sock)", func(t *testing.T, dir string) {
			must(t, os.Symlink(dog.path, filepath.Join(dir, agent.SocketName)))
		}, errNotSocket},
		{"symlink to another session's agent socket", func(t *testing.T, dir string) {
			must(t, os.Symlink(other, filepath.Join(dir, agent.SocketName)))
		}, errNotSocket},
		{"hard link to another session's agent socket", func(t *testing.T, dir string) {
			// A hard link is the socket itself, so it is dialed, and the handshake
			// fails: that agent's secret is not this container's. (An agent cannot
			// make one: it sees no other session's socket.)
			must(t, os.Link(other, filepath.Join(dir, agent.SocketName)))
		}, agent.ErrAuth},
		{"regular file", func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, agent.SocketName), []byte("x"), 0o666))
		}, errNotSocket},
		{"FIFO", func(t *testing.T, dir string) {
			must(t, syscall.Mkfifo(filepath.Join(dir, agent.SocketName), 0o666))
		}, errNotSocket},
		{"dangling symlink", func(t *testing.T, dir string) {
			must(t, os.Symlink("/nonexistent/agent.sock", filepath.Join(dir, agent.SocketName)))
		}, errNotSocket},
		{"directory", func(t *testing.T, dir string) {
			must(t, os.Mkdir(filepath.Join(dir, agent.SocketName), 0o777))
		}, errNotSocket},
		{"nothing (agent not listening)", func(t *testing.T, dir string) {}, syscall.ENOENT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &Driver{socketDir: sockets}
			ss, err := d.newSocketDir("")
			if err != nil {
				t.Fatal(err)
			}
			ss.secret = secret
			tt.plant(t, filepath.Join(sockets, ss.key))
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			conn, err := dialAgent(ctx, sockets, ss)
			if tt.wantErr != nil {
				if conn != nil {
					conn.Close()
				}
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("dial: %v, want %v", err, tt.wantErr)
				}
			} else {
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				defer conn.Close()
				if err := agent.WriteHello(conn, agent.Hello{Protocol: agent.ProtocolVersion, Version: "test"}); err != nil {
					t.Fatal(err)
				}
				if h, err := agent.ReadHello(conn); err != nil || h.Protocol != agent.ProtocolVersion || h.Error != "" {
					t.Fatalf("Hello = %+v, %v", h, err)
				}
			}
			if dog.connected() {
				t.Fatal("cws connected to the host socket a link pointed at")
			}
		})
	}

	t.Run("socket directory replaced by a symlink", func(t *testing.T) {
		// The agent cannot do this: the directory's parent is cws's own (mode 0700), and
		// the container sees only the directory's contents. The dial refuses it anyway.
		key := newKey(t)
		real := t.TempDir()
		serveAgentSocket(t, filepath.Join(real, agent.SocketName), secret)
		must(t, os.Symlink(real, filepath.Join(sockets, key)))
		_, err := dialAgent(t.Context(), sockets, socketSetup{key: key, secret: secret})
		if !errors.Is(err, syscall.ELOOP) && !errors.Is(err, syscall.ENOTDIR) {
			t.Fatalf("dial through a linked directory: %v, want ELOOP", err)
		}
	})

	t.Run("malformed key", func(t *testing.T) {
		_, err := dialAgent(t.Context(), sockets, socketSetup{key: "../" + strings.Repeat("a", 29), secret: secret})
		if err == nil || !strings.Contains(err.Error(), "malformed") {
			t.Fatalf("dial: %v", err)
		}
	})
}

// TestSocketVersionCheck: the Hello and its protocol check are the same on the socket
// path as on the exec stream.
func TestSocketVersionCheck(t *testing.T) {
	sockets := t.TempDir()
	d := &Driver{socketDir: sockets}
	ss, err := d.newSocketDir("")
	if err != nil {
		t.Fatal(err)
	}
	serveAgentSocket(t, filepath.Join(sockets, ss.key, agent.SocketName), ss.secret)
	conn, err := dialAgent(t.Context(), sockets, ss)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := agent.WriteHello(conn, agent.Hello{Protocol: agent.ProtocolVersion + 1, Version: "future"}); err != nil {
		t.Fatal(err)
	}
	h, err := agent.ReadHello(conn)
	if err != nil || h.Error == "" || !strings.Contains(h.Error, "not supported") {
		t.Fatalf("Hello from the future = %+v, %v; want a refusal", h, err)
	}
}

// TestChooseTransport: the automatic choice, and the settings that force one.
func TestChooseTransport(t *testing.T) {
	usable := t.TempDir()
	file := filepath.Join(t.TempDir(), "file")
	must(t, os.WriteFile(file, nil, 0o600))
	tests := []struct {
		want, host, dir string
		got             string // "" means New fails
	}{
		{"", "unix:///var/run/docker.sock", usable, TransportSocket},
		{"auto", "unix:///var/run/docker.sock", usable, TransportSocket},
		{"auto", "tcp://10.0.0.2:2376", usable, TransportExec},
		{"auto", "unix:///var/run/docker.sock", "relative/dir", TransportExec},
		{"auto", "unix:///var/run/docker.sock", file, TransportExec},
		{"socket", "unix:///var/run/docker.sock", usable, TransportSocket},
		{"socket", "tcp://10.0.0.2:2376", usable, ""},
		{"socket", "unix:///var/run/docker.sock", file, ""},
		{"exec", "unix:///var/run/docker.sock", usable, TransportExec},
		{"fast", "unix:///var/run/docker.sock", usable, ""},
	}
	for _, tt := range tests {
		d := &Driver{socketDir: tt.dir}
		err := d.chooseTransport(tt.want, tt.host)
		got, why := d.Transport()
		switch {
		case tt.got == "" && err == nil:
			t.Errorf("%s on %s with %s: chose %s, want an error", tt.want, tt.host, tt.dir, got)
		case tt.got != "" && (err != nil || got != tt.got || why == ""):
			t.Errorf("%s on %s with %s: %s (%s), %v; want %s", tt.want, tt.host, tt.dir, got, why, err, tt.got)
		}
	}
	if fi, err := os.Stat(usable); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("socket dir mode = %v, %v; want 0700", fi.Mode(), err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
