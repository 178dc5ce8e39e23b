package server

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/cwsdev/cws/sandbox/agent"
)

// dial serves OpDial on st: it connects to the port on the sandbox's loopback, answers,
// and then pipes the connection and the stream until both ends are done.
func (s *Server) dial(st *yamux.Stream, raw json.RawMessage) {
	var a agent.DialArgs
	if err := json.Unmarshal(raw, &a); err != nil || a.Port < 1 || a.Port > 65535 {
		s.answerDial(st, agent.Errorf(agent.CodeInvalid, "", "dial: port must be 1-65535"))
		return
	}
	if p := s.egressPort.Load(); p != 0 && int64(a.Port) == p {
		s.answerDial(st, agent.Errorf(agent.CodeInvalid, "", "dial: port %d is the workspace's egress proxy, not an app", a.Port))
		return
	}
	port := strconv.Itoa(a.Port)
	d := net.Dialer{Timeout: 10 * time.Second}
	conn, err := d.Dial("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil && errors.Is(err, syscall.ECONNREFUSED) {
		// A server bound to the IPv6 loopback only (Node's "localhost", for one).
		if c6, err6 := d.Dial("tcp", net.JoinHostPort("::1", port)); err6 == nil {
			conn, err = c6, nil
		}
	}
	if err != nil {
		code := agent.CodeInternal
		msg := "dial port " + port + ": " + err.Error()
		if errors.Is(err, syscall.ECONNREFUSED) {
			code, msg = agent.CodeRefused, "nothing is listening on port "+port+" in the workspace"
		}
		s.answerDial(st, &agent.WireError{Code: code, Message: msg})
		return
	}
	if !s.answerDial(st, nil) {
		conn.Close()
		return
	}
	pipe(st, conn)
}

// closeWrite half-closes conn where it can, else closes it.
func closeWrite(conn net.Conn) {
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = conn.Close()
}

// answerDial sends a dial's done frame; false if the stream broke.
func (s *Server) answerDial(st *yamux.Stream, werr *agent.WireError) bool {
	h := &agent.Header{Done: true}
	if werr != nil {
		h.Error = werr
	}
	return agent.WriteFrame(st, h, nil) == nil
}

// pipe copies both ways until both directions are done. Each side's end of data is
// passed on as a half-close (a yamux stream's Close is its write side's FIN), so
// request/response protocols that close their write side work.
func pipe(st *yamux.Stream, conn net.Conn) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		copyChunks(conn, st)
		closeWrite(conn)
	}()
	copyChunks(st, conn)
	_ = st.Close()
	wg.Wait()
	conn.Close()
}

// copyChunks copies src to dst in chunks of up to agent.ChunkSize: a bulk transfer
// costs the multiplexed connection few, large frames.
func copyChunks(dst io.Writer, src io.Reader) {
	buf := make([]byte, agent.ChunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// egressHost is a host session that takes egress streams, and, where it asked for
// them over a unix socket, the connections' descriptors (agent.ConnSender; nil: none).
type egressHost struct {
	sess *yamux.Session
	send agent.ConnSender
}

// egressHosts are the host sessions that take egress streams, newest last.
type egressHosts struct {
	mu    sync.Mutex
	list  []egressHost
	added chan struct{} // closed and replaced when a host is added
}

func (h *egressHosts) add(host egressHost) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.list = append(h.list, host)
	if h.added != nil {
		close(h.added)
	}
	h.added = make(chan struct{})
}

func (h *egressHosts) remove(sess *yamux.Session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, x := range h.list {
		if x.sess == sess {
			h.list = append(h.list[:i], h.list[i+1:]...)
			return
		}
	}
}

// pick returns the newest live host, or a channel closed when one is added.
func (h *egressHosts) pick() (egressHost, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.list) - 1; i >= 0; i-- {
		if !h.list[i].sess.IsClosed() {
			return h.list[i], nil
		}
	}
	if h.added == nil {
		h.added = make(chan struct{})
	}
	return egressHost{}, h.added
}

// egressWait is how long a proxy connection waits for a host to connect.
const egressWait = 10 * time.Second

// ServeEgress accepts the workspace's connections to its egress proxy until l closes,
// and hands each to the host as an OpEgress stream.
func (s *Server) ServeEgress(l net.Listener) error {
	if ta, ok := l.Addr().(*net.TCPAddr); ok {
		s.egressPort.Store(int64(ta.Port))
	}
	for {
		conn, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond) // out of descriptors: don't spin
			continue
		}
		go s.egress(conn)
	}
}

func (s *Server) egress(conn net.Conn) {
	deadline := time.After(egressWait)
wait:
	for {
		host, added := s.egressHosts.pick()
		if host.sess == nil {
			select {
			case <-added:
				continue
			case <-deadline:
				break wait
			}
		}
		if host.send != nil && handOver(host, conn) {
			return
		}
		st, err := host.sess.OpenStream()
		if err == nil && agent.WriteFrame(st, &agent.Header{Op: agent.OpEgress}, nil) == nil {
			pipe(st, conn)
			return
		}
		if st != nil {
			st.Close()
		}
		if !host.sess.IsClosed() {
			break // a live host that can't take a stream: don't spin on it
		}
	}
	const body = "egress: cws is not connected to this workspace; try again in a moment\n"
	_, _ = io.WriteString(conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"+body)
	// Read what the client sent before closing: closing with unread data resets the
	// connection, and the client may lose the answer.
	closeWrite(conn)
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, _ = io.Copy(io.Discard, io.LimitReader(conn, 1<<20))
	conn.Close()
}

// handOver gives conn to host as a descriptor (agent/egressconn.go). false: nothing
// was sent, and the connection goes over a stream. Once the descriptor is sent, conn
// is never piped unless the host says it did not take it: an agent that can't tell
// closes its copy.
func handOver(host egressHost, conn net.Conn) bool {
	tc, ok := conn.(*net.TCPConn)
	if !ok || host.send.SendConn(tc) != nil {
		return false
	}
	args, _ := json.Marshal(agent.EgressArgs{Conn: tc.RemoteAddr().String()})
	st, err := host.sess.OpenStream()
	if err != nil {
		conn.Close()
		return true
	}
	_ = st.SetDeadline(time.Now().Add(egressWait))
	if err := agent.WriteFrame(st, &agent.Header{Op: agent.OpEgress, Args: args}, nil); err != nil {
		st.Close()
		conn.Close()
		return true
	}
	h, _, err := agent.ReadFrame(st)
	var ans agent.EgressAnswer
	if err != nil || h.Error != nil || json.Unmarshal(h.Result, &ans) != nil || ans.Taken {
		st.Close()
		conn.Close() // the host serves its copy (or the connection is lost)
		return true
	}
	_ = st.SetDeadline(time.Time{})
	pipe(st, conn)
	return true
}
