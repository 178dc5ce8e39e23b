package workspace_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/cwsdev/cws/workspace"
)

// TestAheadPipe: what is written comes out in order, in reads of any size, then the
// writer's end (EOF, or its error); a writer past the buffer waits for the reader, and
// a reader that goes away fails it.
func TestAheadPipe(t *testing.T) {
	t.Run("bytes in order, then EOF", func(t *testing.T) {
		p := workspace.NewAheadPipe(1 << 10)
		var want bytes.Buffer
		go func() {
			for i := range 300 {
				b := bytes.Repeat([]byte{byte(i)}, i*7%1500)
				_, _ = p.Write(b)
			}
			p.CloseWrite(nil)
		}()
		for i := range 300 {
			want.Write(bytes.Repeat([]byte{byte(i)}, i*7%1500))
		}
		got, err := io.ReadAll(io.LimitReader(oddReads{p}, 1<<30))
		if err != nil || !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("read %d bytes (%v), want the %d written", len(got), err, want.Len())
		}
	})
	t.Run("the writer's error after what it wrote", func(t *testing.T) {
		p := workspace.NewAheadPipe(1 << 10)
		boom := errors.New("store reset")
		_, _ = p.Write([]byte("partial"))
		p.CloseWrite(boom)
		got, err := io.ReadAll(p)
		if string(got) != "partial" || !errors.Is(err, boom) {
			t.Fatalf("read %q, %v; want \"partial\", then %v", got, err, boom)
		}
	})
	t.Run("a reader that goes away fails a waiting writer", func(t *testing.T) {
		p := workspace.NewAheadPipe(4)
		gone := errors.New("restore failed")
		done := make(chan error, 1)
		go func() {
			for {
				if _, err := p.Write([]byte("abcd")); err != nil {
					done <- err
					return
				}
			}
		}()
		buf := make([]byte, 2)
		if _, err := p.Read(buf); err != nil {
			t.Fatal(err)
		}
		p.CloseRead(gone)
		if err := <-done; !errors.Is(err, gone) {
			t.Fatalf("the writer got %v, want %v", err, gone)
		}
	})
}

// oddReads reads in sizes that are not the writes'.
type oddReads struct{ r io.Reader }

func (o oddReads) Read(p []byte) (int, error) { return o.r.Read(p[:min(len(p), 333)]) }
