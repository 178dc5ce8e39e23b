package agent

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"
)

// unixPair returns two ends of a unix stream socket.
func unixPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		ch <- c
	}()
	a, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-ch
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.UnixConn), b.(*net.UnixConn)
}

// tcpPair returns both ends of a loopback TCP connection, and the listener.
func tcpPair(t *testing.T) (client, server *net.TCPConn, l *net.TCPListener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-ch
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn), ln.(*net.TCPListener)
}

// send writes the handover frame with fd attached, as SendConn does.
func send(t *testing.T, c *net.UnixConn, fd int) {
	t.Helper()
	if _, _, err := c.WriteMsgUnix(handoverFrame[:], unix.UnixRights(fd), nil); err != nil {
		t.Fatal(err)
	}
}

func fdOf(t *testing.T, c interface{ File() (*os.File, error) }) int {
	t.Helper()
	f, err := c.File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return int(f.Fd())
}

// The host keeps only connected TCP sockets of what an agent sends, claimed by their
// workspace end's address, and at most maxPendingConns of them.
func TestConnInboxTakesOnlyConnectedTCP(t *testing.T) {
	agentEnd, hostEnd := unixPair(t)
	in := newConnInbox(hostEnd)

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	otherA, _ := unixPair(t)
	ws, proxySide, ln := tcpPair(t)

	send(t, agentEnd, int(r.Fd()))        // a pipe
	send(t, agentEnd, int(file.Fd()))     // a file
	send(t, agentEnd, fdOf(t, otherA))    // a unix socket
	send(t, agentEnd, fdOf(t, ln))        // a listening TCP socket
	send(t, agentEnd, fdOf(t, proxySide)) // the workspace's connection, as the proxy accepted it
	_ = hostEnd.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 5*len(handoverFrame))
	for got := 0; got < len(buf); {
		n, err := in.Read(buf[got:])
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		got += n
	}
	for _, addr := range []string{ln.Addr().String(), "127.0.0.1:1", ""} {
		if c := in.claim(addr); c != nil {
			t.Errorf("claim(%q) = a connection, want none", addr)
		}
	}
	c := in.claim(ws.LocalAddr().String())
	if c == nil {
		t.Fatal("the workspace's connection was not kept")
	}
	defer c.Close()
	if c2 := in.claim(ws.LocalAddr().String()); c2 != nil {
		t.Fatal("a connection was claimed twice")
	}
	// The kept copy is the workspace's connection.
	if _, err := ws.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 4)
	if _, err := c.Read(b); err != nil || string(b) != "ping" {
		t.Fatalf("read %q, %v from the taken connection", b, err)
	}

	// Past maxPendingConns, the oldest unclaimed one is closed: its workspace end sees EOF.
	first, _, _ := tcpPair(t)
	in.add(mustTCP(t, first))
	for range maxPendingConns {
		x, _, _ := tcpPair(t)
		in.add(mustTCP(t, x))
	}
	if in.claim(first.RemoteAddr().String()) != nil {
		t.Error("the oldest pending connection was kept past the bound")
	}
	in.close()
	if len(in.pending) != 0 {
		t.Errorf("%d connections pending after close", len(in.pending))
	}
}

// mustTCP is a copy of c's socket, as the inbox makes it of a descriptor it got.
func mustTCP(t *testing.T, c *net.TCPConn) *net.TCPConn {
	t.Helper()
	fd := fdOf(t, c)
	dup, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := tcpFromFD(dup)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// A stream that names a connection the host does not hold (never sent, or dropped as
// not a TCP socket) gets "not taken", and then carries the connection itself.
func TestTakeEgressNotHeld(t *testing.T) {
	a, b := net.Pipe()
	agentSess, err := yamux.Server(a, YamuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer agentSess.Close()
	hostSess, err := yamux.Client(b, YamuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer hostSess.Close()
	_, hostEnd := unixPair(t)
	l := &link{sess: hostSess, inbox: newConnInbox(hostEnd)}
	got := make(chan net.Conn, 1)
	c := NewClient(nil, "test", nil).WithEgress(func(conn net.Conn) { got <- conn })
	go c.acceptEgress(l)

	st, err := agentSess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(5 * time.Second))
	args, _ := json.Marshal(EgressArgs{Conn: "127.0.0.1:40000"})
	if err := WriteFrame(st, &Header{Op: OpEgress, Args: args}, nil); err != nil {
		t.Fatal(err)
	}
	h, _, err := ReadFrame(st)
	if err != nil {
		t.Fatal(err)
	}
	var ans EgressAnswer
	if err := json.Unmarshal(h.Result, &ans); err != nil || ans.Taken {
		t.Fatalf("answer %s (%v), want not taken", h.Result, err)
	}
	if _, err := st.Write([]byte("over the stream")); err != nil {
		t.Fatal(err)
	}
	var conn net.Conn
	select {
	case conn = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the egress handler got nothing")
	}
	defer conn.Close()
	if _, ok := conn.(*yamux.Stream); !ok {
		t.Fatalf("the handler got a %T, want the stream", conn)
	}
	buf := make([]byte, len("over the stream"))
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "over the stream" {
		t.Fatalf("the handler read %q, %v", buf, err)
	}
}
