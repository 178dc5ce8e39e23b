package agent

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"time"
)

// yamux frames: a 12-byte header (version, type, flags, stream id, length) and, for a
// data frame, length bytes of body. yamux's send loop writes the header and the body in
// two writes; over a socket (or a docker exec stream and its relays) each write is a
// syscall and a wake-up of the reader. frameConn hands every frame to the connection in
// one write.
const (
	yamuxHeaderSize = 12
	yamuxVersion    = 0
	yamuxTypeData   = 0
	yamuxTypeWindow = 1
	yamuxFlagSYN    = 0x1
	yamuxFlagRST    = 0x8
	// coalesceMax bounds what is copied to join a header to its body. directMin is the
	// body from which a frame is not copied at all: its header and body go out in one
	// writev as they are (copying bulk data twice, into the frame and then into the
	// batch, cost a 32 KiB-write stream two thirds of its throughput).
	coalesceMax = 64 << 10
	directMin   = 16 << 10
)

// frameConn wraps the connection a yamux session runs on. It follows the frame
// boundaries in the byte stream (whatever the sizes of the writes it gets) and writes
// when a frame is complete, so a small frame is one write. It never holds a complete
// frame back. A stream that does not parse as yamux is passed through unchanged.
type frameConn struct {
	io.ReadWriteCloser

	mu   sync.Mutex
	buf  []byte // pending bytes of the current frame
	hdr  int    // header bytes of the current frame seen so far (< 12: in the header)
	body uint32 // body bytes of the current frame still to come
	raw  bool   // the stream is not yamux: pass through

	// Complete frames wait in out for the flusher, which writes all that has gathered
	// in one write: a call's open, request and close frames, queued back to back by
	// yamux, usually go out together. Guarded by mu.
	out      []byte
	spare    []byte     // the flusher's other buffer
	flushing bool       // the flusher is writing
	drained  *sync.Cond // signalled when out is empty and nothing is being written
	werr     error      // the first failed write; every later Write returns it
	closed   bool
	kick     chan struct{}
	// A control frame that only opens, acknowledges or closes a stream (see lazyFrame)
	// waits in out for the next frame, or at most lazyWait. armed: lazyTimer runs.
	lazyTimer *time.Timer
	armed     bool
	// vec is the socket under the connection when writes may go to it directly, so a
	// large frame's header and body go out in one writev (see vectored); nil: a frame
	// of up to coalesceMax is copied into one write instead.
	vec io.Writer
	// boundaryWaiters are the SendConn calls waiting for a frame to complete; each
	// completed frame wakes them (drained). Guarded by mu.
	boundaryWaiters int
}

// ReadWatcher is a connection wrapper that only watches reads (the client's liveness):
// a write may go to the connection it wraps.
type ReadWatcher interface{ Watched() io.ReadWriteCloser }

// vectored returns the socket under conn to which net.Buffers writes with one writev,
// or nil: a unix or TCP connection, under read watchers and UnixConners.
func vectored(conn io.ReadWriteCloser) io.Writer {
	for {
		switch c := conn.(type) {
		case *net.UnixConn, *net.TCPConn:
			return c.(io.Writer)
		case UnixConner:
			return c.UnixConn()
		case ReadWatcher:
			conn = c.Watched()
		default:
			return nil
		}
	}
}

// lazyWait is how long a stream's open, acknowledgement or close may wait for a frame
// to go out with. The peer needs none of them promptly: a stream's request follows its
// open at once, an answer follows the acknowledgement, and a close only lets the peer
// forget a finished stream. A busy session's next call carries them, so that a call
// costs each end one wake-up instead of three; an idle one gets them this much later.
const lazyWait = 50 * time.Millisecond

// lazyFrame says whether the complete frame f is a window update that opens (SYN),
// acknowledges (ACK) or half-closes (FIN) a stream and that a later frame may carry:
// one that grants no window (its delta is 0), or an open, whose opener's request
// follows at once. An acknowledgement that grants window (a peer's large upload waits
// on it), a plain window update and a reset never wait.
func lazyFrame(f []byte) bool {
	if len(f) != yamuxHeaderSize || f[1] != yamuxTypeWindow {
		return false
	}
	flags := binary.BigEndian.Uint16(f[2:4])
	delta := binary.BigEndian.Uint32(f[8:12])
	return flags != 0 && flags&yamuxFlagRST == 0 && (delta == 0 || flags == yamuxFlagSYN)
}

// outMax bounds the frames waiting for the flusher: a Write past it waits. spareMax is
// the largest buffer kept between writes.
const (
	outMax   = 256 << 10
	spareMax = 64 << 10
)

// MuxConn returns conn wrapped so that yamux's frames go out one write each, or several
// in one write when they are queued together. Both ends use it under their yamux
// session; it changes nothing on the wire.
func MuxConn(conn io.ReadWriteCloser) io.ReadWriteCloser {
	c := &frameConn{ReadWriteCloser: conn, buf: make([]byte, 0, 4096), kick: make(chan struct{}, 1), vec: vectored(conn)}
	c.drained = sync.NewCond(&c.mu)
	c.lazyTimer = time.AfterFunc(time.Hour, c.lazyDue)
	c.lazyTimer.Stop()
	go c.flusher()
	return c
}

// lazyDue sends the lazy frames that waited lazyWait.
func (c *frameConn) lazyDue() {
	c.mu.Lock()
	c.armed = false
	if !c.closed {
		c.kickFlusher()
	}
	c.mu.Unlock()
}

// flusher writes what gathered in out, one write per wake-up, until Close or a failed
// write (which closes the connection, so the yamux session ends on both loops).
func (c *frameConn) flusher() {
	for range c.kick {
		c.mu.Lock()
		for len(c.out) > 0 && c.werr == nil {
			batch := c.out
			c.out, c.spare = c.spare[:0], nil
			c.flushing = true
			c.mu.Unlock()
			_, err := c.ReadWriteCloser.Write(batch)
			c.mu.Lock()
			c.flushing = false
			if cap(batch) <= spareMax { // a big one goes: thousands of idle sessions each keep theirs
				c.spare = batch[:0]
			}
			if err != nil && c.werr == nil {
				c.werr = err
				go c.ReadWriteCloser.Close()
			}
		}
		closed := c.closed
		c.drained.Broadcast()
		c.mu.Unlock()
		if closed {
			return
		}
	}
}

// closeWait bounds how long Close waits for what is queued to go out: a peer that
// stopped reading (a stopped agent) must never hold a Close.
const closeWait = time.Second

// Close writes what is still waiting (a go-away), then closes the connection. If that
// does not go out within closeWait (or a large write holds the connection that long),
// the connection is cut under it: the stuck write fails.
func (c *frameConn) Close() error {
	cut := time.AfterFunc(closeWait, func() { c.ReadWriteCloser.Close() })
	defer cut.Stop()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.ReadWriteCloser.Close()
	}
	c.closed = true
	for (len(c.out) > 0 || c.flushing) && c.werr == nil {
		c.kickFlusher()
		c.drained.Wait()
	}
	c.lazyTimer.Stop()
	c.mu.Unlock()
	close(c.kick)
	return c.ReadWriteCloser.Close()
}

func (c *frameConn) kickFlusher() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// waitDrained waits until every queued frame is written. Called with mu.
func (c *frameConn) waitDrained() error {
	for (len(c.out) > 0 || c.flushing) && c.werr == nil {
		c.kickFlusher()
		c.drained.Wait()
	}
	return c.werr
}

func (c *frameConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.werr != nil {
		return 0, c.werr
	}
	if c.closed {
		return 0, io.ErrClosedPipe
	}
	if c.raw {
		if err := c.waitDrained(); err != nil {
			return 0, err
		}
		return c.ReadWriteCloser.Write(p)
	}
	n := 0
	for len(p) > 0 {
		if c.hdr < yamuxHeaderSize {
			k := min(yamuxHeaderSize-c.hdr, len(p))
			c.buf = append(c.buf, p[:k]...)
			c.hdr += k
			n += k
			p = p[k:]
			if c.hdr < yamuxHeaderSize {
				break
			}
			h := c.buf[len(c.buf)-yamuxHeaderSize:]
			if h[0] != yamuxVersion {
				c.raw = true
				err := c.writeNow(nil)
				if err == nil && len(p) > 0 {
					var m int
					m, err = c.ReadWriteCloser.Write(p)
					n += m
				}
				return n, err
			}
			c.body = 0
			if h[1] == yamuxTypeData {
				c.body = binary.BigEndian.Uint32(h[8:12])
			}
		} else {
			k := int(min(uint32(len(p)), c.body))
			bulk := c.vec != nil && c.body >= directMin
			if !bulk && len(c.buf)+k <= coalesceMax {
				c.buf = append(c.buf, p[:k]...)
			} else if err := c.writeNow(p[:k]); err != nil {
				return n, err
			}
			c.body -= uint32(k)
			n += k
			p = p[k:]
		}
		if c.hdr == yamuxHeaderSize && c.body == 0 { // a frame is complete
			c.hdr = 0
			if err := c.flush(); err != nil {
				return n, err
			}
			if c.boundaryWaiters > 0 {
				c.drained.Broadcast()
			}
		}
	}
	return n, nil
}

// flush queues the complete frame in buf for the flusher, waiting first if too much is
// queued already. Called with mu.
func (c *frameConn) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	for len(c.out) >= outMax && c.werr == nil {
		c.kickFlusher()
		c.drained.Wait()
	}
	if c.werr != nil {
		return c.werr
	}
	if c.closed { // closed while this write waited for room
		return io.ErrClosedPipe
	}
	lazy := lazyFrame(c.buf)
	c.out = append(c.out, c.buf...)
	c.resetBuf()
	switch {
	case !lazy:
		c.kickFlusher()
	case !c.armed:
		c.armed = true
		c.lazyTimer.Reset(lazyWait)
	}
	return nil
}

// writeNow writes what is queued, then the pending bytes of the current frame, then
// body, in order, for a write that bypasses the queue (a large body, a stream that is
// not yamux): the last two in one writev on a socket, else in two writes. Called with
// mu.
func (c *frameConn) writeNow(body []byte) error {
	if err := c.waitDrained(); err != nil {
		return err
	}
	if c.closed {
		return io.ErrClosedPipe
	}
	var err error
	switch {
	case len(c.buf) > 0 && len(body) > 0 && c.vec != nil:
		bufs := net.Buffers{c.buf, body}
		_, err = bufs.WriteTo(c.vec)
	default:
		if len(c.buf) > 0 {
			_, err = c.ReadWriteCloser.Write(c.buf)
		}
		if err == nil && len(body) > 0 {
			_, err = c.ReadWriteCloser.Write(body)
		}
	}
	c.resetBuf()
	return err
}

func (c *frameConn) resetBuf() {
	c.buf = c.buf[:0]
	if cap(c.buf) > coalesceMax+yamuxHeaderSize {
		c.buf = make([]byte, 0, 4096)
	}
}
