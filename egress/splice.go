package egress

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Bulk bytes between two TCP sockets (a connection the agent handed cws and the
// upstream cws dialled) move with splice(2): from one socket into a pipe and from the
// pipe into the other, never through cws's memory. Anything else (a multiplexer
// stream, TLS cws terminates) is copied as before.

// relay moves src's bytes to dst until src ends (limit < 0) or limit bytes have moved,
// first those br (which reads src, or nil) holds already. Each move touches last. It
// returns the bytes moved and the error that stopped it early (nil: src ended, or
// limit reached).
func relay(dst io.Writer, br *bufio.Reader, src net.Conn, limit int64, last *atomic.Int64) (int64, error) {
	var n int64
	if br != nil && br.Buffered() > 0 {
		k := br.Buffered()
		if limit >= 0 {
			k = int(min(int64(k), limit))
		}
		b, _ := br.Peek(k)
		w, err := dst.Write(b)
		_, _ = br.Discard(w)
		n += int64(w)
		last.Store(time.Now().UnixNano())
		if err != nil {
			return n, err
		}
	}
	if limit >= 0 && n == limit {
		return n, nil
	}
	rest := limit
	if limit >= 0 {
		rest = limit - n
	}
	d, dok := dst.(*net.TCPConn)
	s, sok := src.(*net.TCPConn)
	if dok && sok {
		k, err := spliceTCP(d, s, rest, last)
		return n + k, err
	}
	var from io.Reader = src
	if br != nil {
		from = br
	}
	if rest >= 0 {
		from = io.LimitReader(from, rest)
	}
	k, err := copyTouch(dst, from, last)
	if err == nil && rest >= 0 && k < rest {
		err = io.ErrUnexpectedEOF
	}
	return n + k, err
}

// spliceChunk is the most one splice moves, and the pipe's size: 256 KiB, as the
// copy's buffer, so that a cws not run as root stays well inside the pipe pages a user
// may hold (pipe-user-pages-soft, 64 MiB) with many downloads at once.
const spliceChunk = 256 << 10

// spliced counts the bytes spliceTCP moved, for the tests.
var spliced atomic.Int64

// spliceTCP moves src's bytes to dst through a pipe until src ends (limit < 0) or limit
// bytes have moved; each chunk touches last (the idle watchdog's clock).
func spliceTCP(dst, src *net.TCPConn, limit int64, last *atomic.Int64) (int64, error) {
	srcRC, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	dstRC, err := dst.SyscallConn()
	if err != nil {
		return 0, err
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return 0, err
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	_, _ = unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, spliceChunk) // a smaller pipe only means more calls
	var n int64
	for limit < 0 || n < limit {
		want := spliceChunk
		if limit >= 0 {
			want = int(min(int64(want), limit-n))
		}
		var k int64
		var serr error
		if err := srcRC.Read(func(fd uintptr) bool {
			for {
				k, serr = unix.Splice(int(fd), nil, p[1], nil, want, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
				if serr != unix.EINTR {
					return serr != unix.EAGAIN // EAGAIN: nothing to read yet; wait
				}
			}
		}); err != nil {
			return n, err
		}
		if serr != nil {
			return n, serr
		}
		if k == 0 { // src ended
			if limit >= 0 {
				return n, io.ErrUnexpectedEOF
			}
			return n, nil
		}
		last.Store(time.Now().UnixNano())
		for k > 0 {
			var m int64
			var werr error
			if err := dstRC.Write(func(fd uintptr) bool {
				for {
					m, werr = unix.Splice(p[0], nil, int(fd), nil, int(k), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
					if werr != unix.EINTR {
						return werr != unix.EAGAIN // EAGAIN: dst is full; wait
					}
				}
			}); err != nil {
				return n, err
			}
			if werr != nil {
				return n, werr
			}
			if m == 0 {
				return n, io.ErrShortWrite
			}
			k -= m
			n += m
			spliced.Add(m)
			last.Store(time.Now().UnixNano())
		}
	}
	return n, nil
}

// copyTouch copies src to dst until src ends, touching last on every read; it returns
// the bytes written and the error that stopped it early (nil: src ended).
func copyTouch(dst io.Writer, src io.Reader, last *atomic.Int64) (int64, error) {
	buf := make([]byte, 256<<10)
	var n int64
	for {
		r, err := src.Read(buf)
		if r > 0 {
			last.Store(time.Now().UnixNano())
			w, werr := dst.Write(buf[:r])
			n += int64(w)
			if werr != nil {
				return n, werr
			}
		}
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
