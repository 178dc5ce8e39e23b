package agent

import (
	"encoding/binary"
	"io"
	"sync"
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
	// coalesceMax bounds what is copied to join a header to its body: a larger body goes
	// in a write of its own (its copy would cost more than the saved write).
	coalesceMax = 64 << 10
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
}

// MuxConn returns conn wrapped so that yamux's frames go out one write each. Both ends
// use it under their yamux session; it changes nothing on the wire.
func MuxConn(conn io.ReadWriteCloser) io.ReadWriteCloser {
	return &frameConn{ReadWriteCloser: conn, buf: make([]byte, 0, 4096)}
}

func (c *frameConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.raw {
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
				err := c.flush()
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
			if len(c.buf)+k <= coalesceMax {
				c.buf = append(c.buf, p[:k]...)
			} else {
				if err := c.flush(); err != nil {
					return n, err
				}
				if _, err := c.ReadWriteCloser.Write(p[:k]); err != nil {
					return n, err
				}
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
		}
	}
	return n, nil
}

// flush writes the pending bytes in one write.
func (c *frameConn) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.ReadWriteCloser.Write(c.buf)
	c.buf = c.buf[:0]
	if cap(c.buf) > coalesceMax+yamuxHeaderSize {
		c.buf = make([]byte, 0, 4096)
	}
	return err
}
