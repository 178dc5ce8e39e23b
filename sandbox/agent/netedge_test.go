package agent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server"
)

// The network edges (netedge.go): OpDial from the host into the sandbox's loopback,
// and OpEgress from the agent's egress listener out to the host that asked for it.

// edgeIO bounds every read and write of these tests.
const edgeIO = 5 * time.Second

// edgeServer is a Server for the tests of this file; its clients come from edgeClient.
func edgeServer(t *testing.T) *server.Server {
	t.Helper()
	srv, err := server.New(server.Config{Root: t.TempDir(), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// edgeClient connects a client to srv over net.Pipe (taking egress streams with h when
// h is not nil) and pings once, so that its session exists when it returns.
func edgeClient(t testing.TB, srv *server.Server, h agent.EgressFunc) *agent.Client {
	t.Helper()
	dial := func(ctx context.Context) (io.ReadWriteCloser, error) {
		c, s := net.Pipe()
		go srv.ServeConn(s)
		return c, nil
	}
	c := agent.NewClient(dial, "test", nil)
	if h != nil {
		c = c.WithEgress(h)
	}
	t.Cleanup(c.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), edgeIO)
	defer cancel()
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	return c
}

// tcpServer serves each connection to a fresh 127.0.0.1 port with handle; it returns
// the port.
func tcpServer(t *testing.T, handle func(*net.TCPConn)) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				handle(c.(*net.TCPConn))
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// freePort returns a 127.0.0.1 port nothing listens on (it did a moment ago).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// readN reads exactly n bytes from c within edgeIO.
func readN(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(edgeIO))
	buf := make([]byte, n)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read %d bytes: %v (got %q)", n, err, buf)
	}
	return string(buf)
}

// readRest reads c to its end within edgeIO; a timeout fails the test.
func readRest(t *testing.T, c net.Conn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(edgeIO))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read to the end: %v (got %q)", err, b)
	}
	return string(b)
}

func writeAll(t *testing.T, c net.Conn, s string) {
	t.Helper()
	_ = c.SetWriteDeadline(time.Now().Add(edgeIO))
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatalf("write %q: %v", s, err)
	}
}

// closeWrite ends c's write side: CloseWrite where c has it, else Close, which for a
// yamux stream is its FIN (reads go on).
func closeWrite(t *testing.T, c net.Conn) {
	t.Helper()
	var err error
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		err = cw.CloseWrite()
	} else {
		err = c.Close()
	}
	if err != nil {
		t.Fatalf("close write: %v", err)
	}
}

func TestDialEchoAndHalfClose(t *testing.T) {
	sawEOF := make(chan struct{})
	port := tcpServer(t, func(c *net.TCPConn) {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
			}
			if errors.Is(err, io.EOF) {
				close(sawEOF)
				_, _ = c.Write([]byte("bye"))
				return
			}
			if err != nil {
				return
			}
		}
	})
	srv := edgeServer(t)
	c := edgeClient(t, srv, nil)

	conn, err := c.Dial(ctxT(t), port)
	if err != nil {
		t.Fatalf("dial %d: %v", port, err)
	}
	defer conn.Close()
	writeAll(t, conn, "hello")
	if got := readN(t, conn, 5); got != "hello" {
		t.Fatalf("echo = %q, want %q", got, "hello")
	}
	writeAll(t, conn, "again")
	if got := readN(t, conn, 5); got != "again" {
		t.Fatalf("echo = %q, want %q", got, "again")
	}
	select {
	case <-sawEOF:
		t.Fatal("the server saw EOF before the client ended its write side")
	default:
	}

	closeWrite(t, conn)
	select {
	case <-sawEOF:
	case <-time.After(edgeIO):
		t.Fatal("the server in the sandbox never saw EOF after the client's half-close")
	}
	if got := readRest(t, conn); got != "bye" {
		t.Fatalf("after the half-close read %q, want the server's final %q", got, "bye")
	}
}

// The sandbox's side may end its writes first: the host reads to EOF and can still
// write, and the sandbox's side gets it.
func TestDialHalfCloseFromSandbox(t *testing.T) {
	got := make(chan string, 1)
	port := tcpServer(t, func(c *net.TCPConn) {
		_, _ = c.Write([]byte("hi"))
		_ = c.CloseWrite()
		b, _ := io.ReadAll(c)
		got <- string(b)
	})
	srv := edgeServer(t)
	c := edgeClient(t, srv, nil)
	conn, err := c.Dial(ctxT(t), port)
	if err != nil {
		t.Fatalf("dial %d: %v", port, err)
	}
	defer conn.Close()
	if s := readRest(t, conn); s != "hi" {
		t.Fatalf("read %q to the end, want %q", s, "hi")
	}
	writeAll(t, conn, "after")
	closeWrite(t, conn)
	select {
	case s := <-got:
		if s != "after" {
			t.Fatalf("the sandbox's side read %q, want %q", s, "after")
		}
	case <-time.After(edgeIO):
		t.Fatal("the sandbox's side never got EOF")
	}
}

// Dial's context bounds the dial only: cancelling it later leaves the connection be.
func TestDialContextEndsWithTheDial(t *testing.T) {
	port := tcpServer(t, func(c *net.TCPConn) {
		_, _ = io.Copy(c, c)
	})
	srv := edgeServer(t)
	c := edgeClient(t, srv, nil)
	ctx, cancel := context.WithTimeout(context.Background(), edgeIO)
	conn, err := c.Dial(ctx, port)
	if err != nil {
		cancel()
		t.Fatalf("dial %d: %v", port, err)
	}
	defer conn.Close()
	cancel()
	time.Sleep(20 * time.Millisecond)
	writeAll(t, conn, "still")
	if s := readN(t, conn, 5); s != "still" {
		t.Fatalf("echo after the context ended = %q", s)
	}

	// A context that is already done fails the dial.
	done, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if conn, err := c.Dial(done, port); err == nil {
		conn.Close()
		t.Fatal("a dial with a cancelled context succeeded")
	}
}

func TestDialRefused(t *testing.T) {
	srv := edgeServer(t)
	c := edgeClient(t, srv, nil)
	port := freePort(t)
	conn, err := c.Dial(ctxT(t), port)
	if err == nil {
		conn.Close()
		t.Fatalf("dial of port %d where nothing listens succeeded", port)
	}
	if !errors.Is(err, agent.ErrRefused) {
		t.Fatalf("err = %v, want ErrRefused", err)
	}
	if !strings.Contains(err.Error(), "port "+itoa(port)) {
		t.Fatalf("err = %q does not name port %d", err, port)
	}
	// A refused dial is an answer, not a broken session.
	if _, err := c.Ping(ctxT(t)); err != nil {
		t.Fatalf("ping after a refused dial: %v", err)
	}
}

func TestDialInvalidPort(t *testing.T) {
	var dials atomic.Int32
	c := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) {
		dials.Add(1)
		return nil, errors.New("the agent must not be contacted")
	}, "test", nil)
	t.Cleanup(c.Shutdown)
	for _, port := range []int{0, 65536, -1} {
		conn, err := c.Dial(ctxT(t), port)
		if err == nil {
			conn.Close()
			t.Fatalf("dial of port %d succeeded", port)
		}
		if !errors.Is(err, agent.ErrInvalid) {
			t.Errorf("dial of port %d: err = %v, want ErrInvalid", port, err)
		}
		if !strings.Contains(err.Error(), itoa(port)) {
			t.Errorf("dial of port %d: err = %q does not name the port", port, err)
		}
	}
	if n := dials.Load(); n != 0 {
		t.Fatalf("an invalid port dialed the agent %d times", n)
	}
}

// The agent checks the port too, for a host that doesn't.
func TestDialInvalidPortAtTheAgent(t *testing.T) {
	srv := edgeServer(t)
	c := edgeClient(t, srv, nil)
	for _, args := range []string{`{"port":0}`, `{"port":65536}`, `{"port":"x"}`} {
		h, err := agent.RawCall(ctxT(t), c, &agent.Header{Op: agent.OpDial, Args: json.RawMessage(args)})
		if err != nil {
			t.Fatalf("%s: %v", args, err)
		}
		if h.Error == nil || h.Error.Code != agent.CodeInvalid {
			t.Errorf("%s: answer %+v, want an %q error", args, h.Error, agent.CodeInvalid)
		}
	}
}

func TestDialConcurrentTransfers(t *testing.T) {
	port := tcpServer(t, func(c *net.TCPConn) {
		_, _ = io.Copy(c, c)
		_ = c.CloseWrite()
	})
	srv := edgeServer(t)
	c := edgeClient(t, srv, nil)

	const conns, size = 50, 64 << 10
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload := make([]byte, size)
			_, _ = rand.Read(payload)
			conn, err := c.Dial(ctx, port)
			if err != nil {
				t.Errorf("conn %d: dial: %v", i, err)
				return
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
			werr := make(chan error, 1)
			go func() {
				_, err := conn.Write(payload)
				if err == nil {
					err = conn.Close() // the FIN: the echo server's copy ends
				}
				werr <- err
			}()
			got, err := io.ReadAll(conn)
			if err != nil {
				t.Errorf("conn %d: read: %v after %d bytes", i, err, len(got))
				return
			}
			if err := <-werr; err != nil {
				t.Errorf("conn %d: write: %v", i, err)
			}
			if !bytes.Equal(got, payload) {
				t.Errorf("conn %d: echoed %d bytes that differ from the %d sent", i, len(got), len(payload))
			}
		}()
	}
	wg.Wait()
}

// egressCatcher is an EgressFunc that hands each connection to the test.
type egressCatcher struct {
	handed bool         // connections should come as the workspace's TCP connections
	wrong  atomic.Int64 // connections that came the other way

	mu    sync.Mutex
	conns chan net.Conn
	all   []net.Conn
}

func newCatcher(t *testing.T) *egressCatcher {
	e := &egressCatcher{conns: make(chan net.Conn, 16)}
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, c := range e.all {
			c.Close()
		}
	})
	return e
}

func (e *egressCatcher) handle(c net.Conn) {
	if _, tcp := c.(*net.TCPConn); tcp != e.handed {
		e.wrong.Add(1)
	}
	e.mu.Lock()
	e.all = append(e.all, c)
	e.mu.Unlock()
	e.conns <- c
}

// next returns the next connection the handler got, failing the test after wait.
func (e *egressCatcher) next(t *testing.T, wait time.Duration) net.Conn {
	t.Helper()
	select {
	case c := <-e.conns:
		if n := e.wrong.Load(); n > 0 {
			t.Fatalf("%d connections came as %T; handed over: want %v", n, c, e.handed)
		}
		return c
	case <-time.After(wait):
		t.Fatal("the egress handler got no connection")
		return nil
	}
}

// none fails the test when the handler got a connection.
func (e *egressCatcher) none(t *testing.T) {
	t.Helper()
	select {
	case <-e.conns:
		t.Fatal("this host's egress handler got a connection")
	default:
	}
}

// serveEgress runs srv.ServeEgress on a fresh 127.0.0.1 listener and returns its
// address; the cleanup closes the listener and checks that ServeEgress returned nil.
func serveEgress(t *testing.T, srv *server.Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeEgress(l) }()
	t.Cleanup(func() {
		l.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("ServeEgress after its listener closed: %v", err)
			}
		case <-time.After(edgeIO):
			t.Error("ServeEgress did not return after its listener closed")
		}
	})
	return l.Addr().String()
}

func dialTCP(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, edgeIO)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// TestEgress runs a connection's exchanges where its bytes ride the stream (over a
// net.Pipe, and over a unix socket whose host does not ask for the connections) and
// where the host takes the connection itself (egressconn.go): the same bytes and
// half-closes every way.
func TestEgress(t *testing.T) {
	for _, tr := range []struct {
		name   string
		client func(testing.TB, *server.Server, agent.EgressFunc) *agent.Client
		handed bool
	}{
		{"stream", edgeClient, false},
		{"stream over a unix socket, the host not asking", func(t testing.TB, srv *server.Server, h agent.EgressFunc) *agent.Client {
			return unixEdgeClient(t, srv, h, false)
		}, false},
		{"handed over", socketEdgeClient, true},
	} {
		t.Run(tr.name, func(t *testing.T) {
			srv := edgeServer(t)
			addr := serveEgress(t, srv)
			e := newCatcher(t)
			e.handed = tr.handed
			tr.client(t, srv, e.handle)
			egressExchanges(t, addr, e)
		})
	}
}

// egressExchanges checks the bytes and half-closes of egress connections to addr that
// e's host gets.
func egressExchanges(t *testing.T, addr string, e *egressCatcher) {
	t.Run("workspace closes its write side first", func(t *testing.T) {
		w := dialTCP(t, addr)
		writeAll(t, w, "CONNECT example.com:443 HTTP/1.1\r\n\r\n")
		h := e.next(t, edgeIO)
		if got := readN(t, h, len("CONNECT example.com:443 HTTP/1.1\r\n\r\n")); got != "CONNECT example.com:443 HTTP/1.1\r\n\r\n" {
			t.Fatalf("the host read %q", got)
		}
		writeAll(t, h, "HTTP/1.1 200 OK\r\n\r\n")
		if got := readN(t, w, len("HTTP/1.1 200 OK\r\n\r\n")); got != "HTTP/1.1 200 OK\r\n\r\n" {
			t.Fatalf("the workspace read %q", got)
		}
		// Both ways again, after the first exchange.
		writeAll(t, w, "up")
		if got := readN(t, h, 2); got != "up" {
			t.Fatalf("the host read %q", got)
		}
		closeWrite(t, w)
		if got := readRest(t, h); got != "" {
			t.Fatalf("after the workspace's half-close the host read %q, want EOF", got)
		}
		writeAll(t, h, "last")
		closeWrite(t, h)
		if got := readRest(t, w); got != "last" {
			t.Fatalf("the workspace read %q to the end, want %q", got, "last")
		}
	})

	t.Run("host closes first", func(t *testing.T) {
		w := dialTCP(t, addr)
		writeAll(t, w, "x")
		h := e.next(t, edgeIO)
		if got := readN(t, h, 1); got != "x" {
			t.Fatalf("the host read %q", got)
		}
		writeAll(t, h, "reply")
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if got := readRest(t, w); got != "reply" {
			t.Fatalf("the workspace read %q to the end, want %q", got, "reply")
		}
	})

	t.Run("workspace closes", func(t *testing.T) {
		w := dialTCP(t, addr)
		writeAll(t, w, "y")
		h := e.next(t, edgeIO)
		if got := readN(t, h, 1); got != "y" {
			t.Fatalf("the host read %q", got)
		}
		w.Close()
		if got := readRest(t, h); got != "" {
			t.Fatalf("after the workspace closed the host read %q, want EOF", got)
		}
	})
	e.none(t)
}

// A connection made while no host is connected waits for one.
func TestEgressHostConnectsDuringWait(t *testing.T) {
	srv := edgeServer(t)
	addr := serveEgress(t, srv)
	w := dialTCP(t, addr)
	writeAll(t, w, "early")
	time.Sleep(200 * time.Millisecond) // the agent is waiting for a host now
	e := newCatcher(t)
	edgeClient(t, srv, e.handle)
	h := e.next(t, time.Second)
	if got := readN(t, h, 5); got != "early" {
		t.Fatalf("the host read %q, want what the workspace wrote before it connected", got)
	}
	writeAll(t, h, "late")
	closeWrite(t, h)
	if got := readRest(t, w); got != "late" {
		t.Fatalf("the workspace read %q, want %q", got, "late")
	}
}

// The newest host that takes egress gets the connections.
func TestEgressNewestHost(t *testing.T) {
	srv := edgeServer(t)
	addr := serveEgress(t, srv)
	older, newer := newCatcher(t), newCatcher(t)
	edgeClient(t, srv, older.handle)
	edgeClient(t, srv, newer.handle)
	for range 3 {
		w := dialTCP(t, addr)
		writeAll(t, w, "n")
		h := newer.next(t, edgeIO)
		if got := readN(t, h, 1); got != "n" {
			t.Fatalf("the host read %q", got)
		}
		h.Close()
	}
	older.none(t)
}

// A host without WithEgress says so in its Hello and never gets an egress stream, even
// when it is the newest.
func TestEgressSkipsHostWithoutEgress(t *testing.T) {
	srv := edgeServer(t)
	addr := serveEgress(t, srv)
	e := newCatcher(t)
	edgeClient(t, srv, e.handle)
	plain := edgeClient(t, srv, nil) // connected last
	for i := range 5 {
		w := dialTCP(t, addr)
		writeAll(t, w, "c"+itoa(i))
		h := e.next(t, 3*time.Second)
		if got := readN(t, h, 2); got != "c"+itoa(i) {
			t.Fatalf("the host read %q", got)
		}
		writeAll(t, h, "ok")
		if got := readN(t, w, 2); got != "ok" {
			t.Fatalf("the workspace read %q", got)
		}
		h.Close()
	}
	if _, err := plain.Ping(ctxT(t)); err != nil {
		t.Fatalf("the host without egress: ping: %v", err)
	}
}

// With no host that takes egress the workspace gets a 503 once the agent gave up
// waiting (server.egressWait, 10 s). The cases run at once, in goroutines rather than
// parallel subtests, which -test.parallel (GOMAXPROCS) would serialise.
func TestEgressNotConnected(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the agent's egress wait (10 s)")
	}
	const req = "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n"
	cases := []struct {
		name    string
		plain   bool   // a host without egress is connected
		request string // what the workspace sends first (an HTTP client sends its request at once)
	}{
		{"no host, silent client", false, ""},
		{"no host, client sent its request", false, req},
		{"only a host without egress", true, ""},
	}
	var wg sync.WaitGroup
	for _, tc := range cases {
		srv := edgeServer(t)
		addr := serveEgress(t, srv)
		if tc.plain {
			edgeClient(t, srv, nil)
		}
		w := dialTCP(t, addr)
		if tc.request != "" {
			writeAll(t, w, tc.request)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A 503 that says "not connected", ended by a clean EOF, not a reset.
			_ = w.SetReadDeadline(time.Now().Add(20 * time.Second))
			b, err := io.ReadAll(w)
			got := string(b)
			if !strings.HasPrefix(got, "HTTP/1.1 503 ") || !strings.Contains(got, "not connected") {
				t.Errorf("%s: answer %q (read error %v), want a 503 that says not connected", tc.name, got, err)
				return
			}
			if err != nil {
				t.Errorf("%s: after the 503 the read ended with %v, want EOF", tc.name, err)
			}
		}()
	}
	wg.Wait()
}
