package agent

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// writeLog records each write the wrapped connection makes.
type writeLog struct {
	writes [][]byte
}

func (w *writeLog) Read(p []byte) (int, error) { return 0, nil }
func (w *writeLog) Close() error               { return nil }
func (w *writeLog) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
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
// unchanged, a small frame in exactly one write, and no complete frame is held back.
func TestMuxConnFrames(t *testing.T) {
	small := bytes.Repeat([]byte("a"), 4200)
	big := bytes.Repeat([]byte("b"), coalesceMax+1000)
	frames := [][]byte{
		yamuxFrame(1, 1, nil, 262144),               // window update (SYN): length is a delta, no body
		yamuxFrame(0, 1, small, uint32(len(small))), // data
		yamuxFrame(0, 1, nil, 0),                    // empty data
		yamuxFrame(2, 0, nil, 7),                    // ping: length is an opaque value
		yamuxFrame(0, 3, big, uint32(len(big))),     // data larger than coalesceMax
		yamuxFrame(1, 1, nil, 0),                    // FIN
	}
	var stream []byte
	var ends []int // where each frame ends in the stream
	for _, f := range frames {
		stream = append(stream, f...)
		ends = append(ends, len(stream))
	}
	written := func(log *writeLog) int { return len(bytes.Join(log.writes, nil)) }

	t.Run("as yamux writes: header, then body", func(t *testing.T) {
		log := &writeLog{}
		c := MuxConn(log)
		for _, f := range frames {
			mustWrite(t, c, f[:yamuxHeaderSize])
			if len(f) > yamuxHeaderSize {
				mustWrite(t, c, f[yamuxHeaderSize:])
			}
		}
		if got := bytes.Join(log.writes, nil); !bytes.Equal(got, stream) {
			t.Fatal("the bytes changed")
		}
		// Every small frame is one write; the big one is its header, then its body.
		want := []int{12, 12 + len(small), 12, 12, 12, len(big), 12}
		if len(log.writes) != len(want) {
			t.Fatalf("%d writes, want %d", len(log.writes), len(want))
		}
		for i, w := range log.writes {
			if len(w) != want[i] {
				t.Errorf("write %d: %d bytes, want %d", i, len(w), want[i])
			}
		}
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
				if w := written(log); w < complete {
					t.Fatalf("after %d bytes, %d written: a complete frame is held back", given, w)
				}
			}
			if got := bytes.Join(log.writes, nil); !bytes.Equal(got, stream) {
				t.Fatal("the bytes changed")
			}
		}
	})

	t.Run("not yamux: passed through", func(t *testing.T) {
		log := &writeLog{}
		c := MuxConn(log)
		junk := []byte("\x07this is not a yamux stream")
		mustWrite(t, c, junk[:5])
		mustWrite(t, c, junk[5:])
		if got := bytes.Join(log.writes, nil); !bytes.Equal(got, junk) {
			t.Fatalf("got %q", got)
		}
	})
}

func mustWrite(t *testing.T, c interface{ Write([]byte) (int, error) }, p []byte) {
	t.Helper()
	if n, err := c.Write(p); n != len(p) || err != nil {
		t.Fatalf("Write = %d, %v; want %d", n, err, len(p))
	}
}
