package agent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server"
)

// Egress connections handed over (egressconn.go): on a unix socket the agent sends the
// host the workspace's connection itself, and the host serves it.

// socketEdgeClient is edgeClient over a real unix socket, as the Docker driver's
// socket transport dials: the host asks for the egress connections' descriptors.
func socketEdgeClient(t testing.TB, srv *server.Server, h agent.EgressFunc) *agent.Client {
	return unixEdgeClient(t, srv, h, true)
}

// unixEdgeClient is edgeClient over a real unix socket; handover: the client may take
// egress connections (it knows the socket is one, as an agent.UnixConner), else their
// bytes ride their streams over the socket.
func unixEdgeClient(t testing.TB, srv *server.Server, h agent.EgressFunc, handover bool) *agent.Client {
	t.Helper()
	dial := func(ctx context.Context) (io.ReadWriteCloser, error) {
		fds, err := socketpair()
		if err != nil {
			return nil, err
		}
		go srv.ServeConn(fds[1])
		if !handover {
			return fds[0], nil
		}
		return unixConn{Conn: fds[0], uc: fds[0].(*net.UnixConn)}, nil
	}
	c := agent.NewClient(dial, "test", nil).WithEgress(h)
	t.Cleanup(c.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), edgeIO)
	defer cancel()
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	return c
}

// A large transfer each way at once arrives byte for byte, on the workspace's own
// connection.
func TestEgressHandoverBulk(t *testing.T) {
	srv := edgeServer(t)
	addr := serveEgress(t, srv)
	e := newCatcher(t)
	e.handed = true
	socketEdgeClient(t, srv, e.handle)

	down, up := make([]byte, 64<<20), make([]byte, 16<<20)
	_, _ = rand.Read(down)
	_, _ = rand.Read(up)
	w := dialTCP(t, addr)
	writeAll(t, w, "go")
	h := e.next(t, edgeIO)
	if got := readN(t, h, 2); got != "go" {
		t.Fatalf("the host read %q", got)
	}
	deadline := time.Now().Add(30 * time.Second)
	_ = w.SetDeadline(deadline)
	_ = h.SetDeadline(deadline)
	type result struct {
		sum [32]byte
		n   int
		err error
	}
	read := func(c net.Conn) <-chan result {
		ch := make(chan result, 1)
		go func() {
			b, err := io.ReadAll(c)
			ch <- result{sha256.Sum256(b), len(b), err}
		}()
		return ch
	}
	atHost, atWorkspace := read(h), read(w)
	send := func(c net.Conn, b []byte) <-chan error {
		ch := make(chan error, 1)
		go func() {
			_, err := c.Write(b)
			if err == nil {
				err = c.(*net.TCPConn).CloseWrite()
			}
			ch <- err
		}()
		return ch
	}
	sentDown, sentUp := send(h, down), send(w, up)
	for name, ch := range map[string]<-chan error{"download": sentDown, "upload": sentUp} {
		if err := <-ch; err != nil {
			t.Fatalf("%s: write: %v", name, err)
		}
	}
	for _, c := range []struct {
		name string
		got  result
		want []byte
	}{{"the workspace", <-atWorkspace, down}, {"the host", <-atHost, up}} {
		if c.got.err != nil || c.got.n != len(c.want) || c.got.sum != sha256.Sum256(c.want) {
			t.Errorf("%s read %d bytes (error %v), want the %d bytes sent, byte for byte", c.name, c.got.n, c.got.err, len(c.want))
		}
	}
}

// A connection cut in the middle of a download shows as cut on the other end: a
// workspace reads a short body and then the end (the host closed), and the host's
// writes fail (the workspace's process went away).
func TestEgressHandoverCut(t *testing.T) {
	srv := edgeServer(t)
	addr := serveEgress(t, srv)
	e := newCatcher(t)
	e.handed = true
	socketEdgeClient(t, srv, e.handle)
	chunk := bytes.Repeat([]byte("x"), 1<<20)

	t.Run("the host closes", func(t *testing.T) {
		w := dialTCP(t, addr)
		writeAll(t, w, "get")
		h := e.next(t, edgeIO)
		readN(t, h, 3)
		for range 3 {
			if _, err := h.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
		h.Close()
		_ = w.SetReadDeadline(time.Now().Add(edgeIO))
		b, err := io.ReadAll(w)
		if len(b) != 3*len(chunk) {
			t.Fatalf("the workspace read %d bytes (error %v), want the %d sent before the close", len(b), err, 3*len(chunk))
		}
	})

	t.Run("the workspace goes away", func(t *testing.T) {
		w := dialTCP(t, addr)
		writeAll(t, w, "get")
		h := e.next(t, edgeIO)
		readN(t, h, 3)
		readDone := make(chan struct{})
		go func() {
			defer close(readDone)
			readN(t, w, len(chunk)) // the first MiB arrives
			_ = w.SetLinger(0)      // as a killed process's socket: a reset, not a FIN
			w.Close()
		}()
		_ = h.SetWriteDeadline(time.Now().Add(edgeIO))
		var err error
		for i := 0; i < 1024 && err == nil; i++ { // up to 1 GiB: far more than any buffer
			_, err = h.Write(chunk)
		}
		<-readDone
		var ne net.Error
		if err == nil || errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the host's writes after the workspace went away: %v, want a broken connection", err)
		}
	})
}

// BenchmarkEgressDownload moves 64 MiB from the host to a workspace connection over
// a unix socket, riding its stream and handed over:
//
//	go test ./sandbox/agent -run X -bench EgressDownload
func BenchmarkEgressDownload(b *testing.B) {
	const size = 64 << 20
	chunk := make([]byte, 256<<10)
	for _, tr := range []struct {
		name   string
		client func(testing.TB, *server.Server, agent.EgressFunc) *agent.Client
	}{
		{"stream", func(t testing.TB, srv *server.Server, h agent.EgressFunc) *agent.Client {
			return unixEdgeClient(t, srv, h, false)
		}},
		{"handed over", socketEdgeClient},
	} {
		b.Run(tr.name, func(b *testing.B) {
			srv, err := server.New(server.Config{Root: b.TempDir(), Version: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			go func() { _ = srv.ServeEgress(l) }()
			conns := make(chan net.Conn, 1)
			tr.client(b, srv, func(c net.Conn) { conns <- c })
			b.SetBytes(size)
			buf := make([]byte, 1<<20)
			for b.Loop() {
				w, err := net.Dial("tcp", l.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				h := <-conns
				go func() {
					for n := 0; n < size; n += len(chunk) {
						if _, err := h.Write(chunk); err != nil {
							break
						}
					}
					h.Close()
				}()
				n := 0
				for {
					k, err := w.Read(buf)
					n += k
					if err != nil {
						break
					}
				}
				w.Close()
				if n != size {
					b.Fatalf("read %d bytes, want %d", n, size)
				}
			}
		})
	}
}
