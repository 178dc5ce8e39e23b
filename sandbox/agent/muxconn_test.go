package agent

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// writeLog records each write the wrapped connection makes.
type writeLog struct {
	mu     sync.Mutex
	writes [][]byte
	fail   error // when set, writes fail with it
	closed bool
}

func (w *writeLog) Read(p []byte) (int, error) { return 0, nil }
func (w *writeLog) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	return nil
}
func (w *writeLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail != nil {
		return 0, w.fail
	}
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

// snapshot returns the writes so far.
func (w *writeLog) snapshot() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.writes)
}

// settle waits until the bytes written reach n (the flusher writes asynchronously).
func (w *writeLog) settle(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(bytes.Join(w.snapshot(), nil)) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d bytes written: a complete frame is held back", len(bytes.Join(w.snapshot(), nil)), n)
		}
	}
}

// yamuxFrame is a frame as yamux encodes it: version 0, type, flags, stream, length.
func yamuxFrame(typ byte, stream uint32, body []byte, length uint32) []byte {
	h := make([]byte, yamuxHeaderSize)
	h[1] = typ
	binary.BigEndian.PutUint32(h[4:8], stream)
	binary.BigEndian.PutUint32(h[8:12], length)
	return append(h, body...)
}

// TestMuxConnFrames: whatever the sizes of the writes yamux makes, the bytes go out
// unchanged, a small frame never split across writes (frames queued together may share
// one), and no complete frame is held back.
func TestMuxConnFrames(t *testing.T) {
	small := bytes.Repeat([]byte("a"), 4200)
	big := bytes.Repeat([]byte("b"), coalesceMax+1000)
	bulk := bytes.Repeat([]byte("c"), 32<<10)
	frames := [][]byte{
		yamuxFrame(1, 1, nil, 262144),               // window update (SYN): length is a delta, no body
		yamuxFrame(0, 1, small, uint32(len(small))), // data
		yamuxFrame(0, 1, nil, 0),                    // empty data
		yamuxFrame(2, 0, nil, 7),                    // ping: length is an opaque value
		yamuxFrame(0, 3, big, uint32(len(big))),     // data larger than coalesceMax
		yamuxFrame(0, 3, bulk, uint32(len(bulk))),   // bulk data: written as it is, never copied
		yamuxFrame(1, 1, nil, 0),                    // FIN
	}
	var stream []byte
	var ends []int // where each frame ends in the stream
	for _, f := range frames {
		stream = append(stream, f...)
		ends = append(ends, len(stream))
	}
	// unsplit checks that every frame but the bulk ones lies within a single write (a
	// bulk body goes with its header in one writev, on a socket; here, which has no
	// writev, in writes of its own).
	unsplit := func(t *testing.T, writes [][]byte) {
		t.Helper()
		var starts []int
		at := 0
		for _, w := range writes {
			starts = append(starts, at)
			at += len(w)
		}
		for i, end := range ends {
			if len(frames[i])-yamuxHeaderSize >= directMin {
				continue
			}
			begin := end - len(frames[i])
			j := sort.SearchInts(starts, begin+1) - 1 // the write holding the frame's first byte
			if j < 0 || starts[j]+len(writes[j]) < end {
				t.Errorf("frame %d (bytes %d–%d) is split across writes", i, begin, end)
			}
		}
	}

	t.Run("as yamux writes: header, then body", func(t *testing.T) {
		log := &writeLog{}
		c := MuxConn(log)
		for _, f := range frames {
			mustWrite(t, c, f[:yamuxHeaderSize])
			if len(f) > yamuxHeaderSize {
				mustWrite(t, c, f[yamuxHeaderSize:])
			}
		}
		log.settle(t, len(stream))
		writes := log.snapshot()
		if got := bytes.Join(writes, nil); !bytes.Equal(got, stream) {
			t.Fatal("the bytes changed")
		}
		if len(writes) > len(frames)+1 {
			t.Errorf("%d writes for %d frames", len(writes), len(frames))
		}
		unsplit(t, writes)
	})

	t.Run("any split", func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for range 200 {
			log := &writeLog{}
			c := MuxConn(log)
			for given := 0; given < len(stream); {
				n := min(len(stream)-given, 1+r.IntN(300))
				mustWrite(t, c, stream[given:given+n])
				given += n
				complete := 0
				for _, e := range ends {
					if e <= given {
						complete = e
					}
				}
				log.settle(t, complete)
			}
			log.settle(t, len(stream))
			writes := log.snapshot()
			if got := bytes.Join(writes, nil); !bytes.Equal(got, stream) {
				t.Fatal("the bytes changed")
			}
			unsplit(t, writes)
		}
	})

	t.Run("not yamux: passed through", func(t *testing.T) {
		log := &writeLog{}
		c := MuxConn(log)
		junk := []byte("\x07this is not a yamux stream")
		mustWrite(t, c, junk[:5])
		mustWrite(t, c, junk[5:])
		if got := bytes.Join(log.snapshot(), nil); !bytes.Equal(got, junk) {
			t.Fatalf("got %q", got)
		}
	})

	t.Run("a failed write ends the connection", func(t *testing.T) {
		log := &writeLog{fail: io.ErrClosedPipe}
		c := MuxConn(log)
		mustWrite(t, c, frames[0]) // queued: the failure comes from the flusher
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			if _, err := c.Write(frames[2]); err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("writes keep succeeding after the connection failed")
			}
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			log.mu.Lock()
			closed := log.closed
			log.mu.Unlock()
			if closed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the connection was not closed after a failed write, so a reader would never learn of it")
			}
		}
	})

	t.Run("close writes what is queued", func(t *testing.T) {
		log := &writeLog{}
		c := MuxConn(log)
		for _, f := range frames[:4] {
			mustWrite(t, c, f)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if got := bytes.Join(log.snapshot(), nil); !bytes.Equal(got, stream[:ends[3]]) {
			t.Fatalf("after Close, %d of %d bytes written", len(got), ends[3])
		}
		if _, err := c.Write(frames[0]); err == nil {
			t.Error("a write after Close succeeded")
		}
	})
}

func mustWrite(t *testing.T, c interface{ Write([]byte) (int, error) }, p []byte) {
	t.Helper()
	if n, err := c.Write(p); n != len(p) || err != nil {
		t.Fatalf("Write = %d, %v; want %d", n, err, len(p))
	}
}

// withFlags sets a frame's yamux flags.
func withFlags(f []byte, flags uint16) []byte {
	binary.BigEndian.PutUint16(f[2:4], flags)
	return f
}

// TestMuxConnLazyControl: a stream's open, acknowledgement and close go out with the
// next frame when one follows, and on their own within lazyWait when none does. A
// plain window update and a reset never wait.
func TestMuxConnLazyControl(t *testing.T) {
	const syn, ack, fin, rst = 0x1, 0x2, 0x4, 0x8
	data := yamuxFrame(0, 1, []byte("request"), 7)

	for _, tc := range []struct {
		name  string
		flags uint16
		delta uint32
	}{{"open", syn, 16 << 20}, {"acknowledgement", ack, 0}, {"close", fin, 0}} {
		t.Run(tc.name+" goes with the next frame", func(t *testing.T) {
			log := &writeLog{}
			c := MuxConn(log)
			defer c.Close()
			ctl := withFlags(yamuxFrame(1, 1, nil, tc.delta), tc.flags)
			mustWrite(t, c, ctl)
			time.Sleep(lazyWait / 5)
			if n := len(log.snapshot()); n != 0 {
				t.Fatalf("the %s went out alone at once (%d writes)", tc.name, n)
			}
			mustWrite(t, c, data)
			log.settle(t, len(ctl)+len(data))
			if w := log.snapshot(); len(w) != 1 || !bytes.Equal(w[0], append(slices.Clone(ctl), data...)) {
				t.Fatalf("%d writes, want the %s and the data in one", len(w), tc.name)
			}
		})
		t.Run(tc.name+" alone goes within lazyWait", func(t *testing.T) {
			log := &writeLog{}
			c := MuxConn(log)
			defer c.Close()
			ctl := withFlags(yamuxFrame(1, 1, nil, tc.delta), tc.flags)
			start := time.Now()
			mustWrite(t, c, ctl)
			log.settle(t, len(ctl))
			if waited := time.Since(start); waited < lazyWait/2 {
				t.Errorf("went out after %v, want about %v", waited, lazyWait)
			}
		})
	}

	for _, tc := range []struct {
		name string
		f    []byte
	}{
		{"a plain window update", yamuxFrame(1, 1, nil, 1<<20)},
		{"an acknowledgement that grants window", withFlags(yamuxFrame(1, 1, nil, 16<<20), ack)},
		{"an open that also acknowledges, with window", withFlags(yamuxFrame(1, 1, nil, 16<<20), syn|ack)},
		{"a reset", withFlags(yamuxFrame(1, 1, nil, 0), rst)},
		{"a reset with a close", withFlags(yamuxFrame(1, 1, nil, 0), rst|fin)},
		{"an empty data frame that closes", withFlags(yamuxFrame(0, 1, nil, 0), fin)},
	} {
		t.Run(tc.name+" never waits", func(t *testing.T) {
			log := &writeLog{}
			c := MuxConn(log)
			defer c.Close()
			start := time.Now()
			mustWrite(t, c, tc.f)
			log.settle(t, len(tc.f))
			if waited := time.Since(start); waited >= lazyWait {
				t.Errorf("waited %v", waited)
			}
		})
	}

	t.Run("close writes a waiting frame", func(t *testing.T) {
		log := &writeLog{}
		c := MuxConn(log)
		ctl := withFlags(yamuxFrame(1, 1, nil, 0), fin)
		mustWrite(t, c, ctl)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if got := bytes.Join(log.snapshot(), nil); !bytes.Equal(got, ctl) {
			t.Fatalf("after Close: %q", got)
		}
	})
}

// BenchmarkMuxConnBulk streams data one way over yamux on a unix socket, frameConn on
// both ends, in writes of 32 KiB (what net/http's body copy makes: a preview's or an
// egress response's body) and of ChunkSize. It prints MB/s (at 32 KiB, 0.78 GB/s when
// every frame was copied twice; 2.4 GB/s written as it is, on this machine).
func BenchmarkMuxConnBulk(b *testing.B) {
	for _, size := range []int{32 << 10, ChunkSize} {
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			l, err := net.Listen("unix", filepath.Join(b.TempDir(), "s"))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				s, err := yamux.Server(MuxConn(c), YamuxConfig())
				if err != nil {
					return
				}
				defer s.Close()
				st, err := s.Accept()
				if err != nil {
					return
				}
				buf := make([]byte, size)
				for {
					if _, err := st.Write(buf); err != nil {
						return
					}
				}
			}()
			c, err := net.Dial("unix", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			s, err := yamux.Client(MuxConn(c), YamuxConfig())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			st, err := s.Open()
			if err != nil {
				b.Fatal(err)
			}
			const total = 64 << 20
			buf := make([]byte, ChunkSize)
			b.SetBytes(total)
			for b.Loop() {
				for n := 0; n < total; {
					m, err := st.Read(buf)
					if err != nil {
						b.Fatal(err)
					}
					n += m
				}
			}
		})
	}
}

// TestMuxConnVectored: frameConn writes a large frame with one writev straight to the
// socket under the read watcher (the client's liveness wrapper); on anything else it
// copies frames of up to coalesceMax into one write, as before.
func TestMuxConnVectored(t *testing.T) {
	a, b, err := socketPair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	if got := vectored(heardConn{a, nil}); got != io.Writer(a) {
		t.Errorf("vectored(heardConn{unix}) = %T, want the *net.UnixConn", got)
	}
	if got := vectored(&writeLog{}); got != nil {
		t.Errorf("vectored(a plain writer) = %T, want nil", got)
	}

	// No writev: a 32 KiB frame still goes out in one (copied) write.
	log := &writeLog{}
	c := MuxConn(log)
	body := bytes.Repeat([]byte("d"), 32<<10)
	f := yamuxFrame(0, 5, body, uint32(len(body)))
	mustWrite(t, c, f[:yamuxHeaderSize])
	mustWrite(t, c, f[yamuxHeaderSize:])
	log.settle(t, len(f))
	if w := log.snapshot(); len(w) != 1 || !bytes.Equal(w[0], f) {
		t.Errorf("%d writes for one 32 KiB frame on a writer without writev, want 1", len(w))
	}

	// Over a socket: the frame arrives whole, header first.
	sc := MuxConn(heardConn{a, nil})
	go func() {
		mustWrite(t, sc, f[:yamuxHeaderSize])
		mustWrite(t, sc, f[yamuxHeaderSize:])
	}()
	got := make([]byte, len(f))
	if _, err := io.ReadFull(b, got); err != nil || !bytes.Equal(got, f) {
		t.Fatalf("over the socket: %v, equal %v", err, bytes.Equal(got, f))
	}
}

// socketPair is two connected unix sockets.
func socketPair() (*net.UnixConn, *net.UnixConn, error) {
	dir, err := os.MkdirTemp("", "mux")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "s"), Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	a, err := net.DialUnix("unix", nil, l.Addr().(*net.UnixAddr))
	if err != nil {
		return nil, nil, err
	}
	b, err := l.AcceptUnix()
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// blockingWriter holds every write until release is closed.
type blockingWriter struct {
	writeLog
	release chan struct{}
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	<-w.release
	return w.writeLog.Write(p)
}

// TestMuxConnCloseWhileFull: a Close that drains the queue while a Write waits for
// room in it ends that Write with an error; nothing panics (the flusher's channel is
// closed by then).
func TestMuxConnCloseWhileFull(t *testing.T) {
	frame := yamuxFrame(0, 1, bytes.Repeat([]byte("x"), 1000), 1000)
	for range 20 {
		w := &blockingWriter{release: make(chan struct{})}
		c := MuxConn(w)
		wrote := make(chan error, 1)
		go func() {
			for {
				if _, err := c.Write(frame); err != nil {
					wrote <- err
					return
				}
			}
		}()
		time.Sleep(5 * time.Millisecond) // the queue fills; the writer waits for room
		closed := make(chan struct{})
		go func() { c.Close(); close(closed) }()
		time.Sleep(time.Millisecond)
		close(w.release)
		<-closed
		select {
		case <-wrote:
		case <-time.After(5 * time.Second):
			t.Fatal("a Write waiting for room never returned after Close")
		}
	}
}
