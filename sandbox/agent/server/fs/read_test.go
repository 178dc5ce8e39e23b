package fs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent"
)

// heldBytes gathers a read's data; grow, if set, runs once after the first chunk (a
// process writing the file while it is read).
type heldBytes struct {
	b    []byte
	grow func()
}

func (h *heldBytes) Hold(_ string, p []byte) error {
	h.b = append(h.b, p...)
	if g := h.grow; g != nil {
		h.grow = nil
		g()
	}
	return nil
}

// TestReadDecodedShapes: every read shape (sizes around the chunk, offsets, lengths,
// limits, with and without the hash) gives exactly the bytes it asks for, with their
// count and sum, and a file over the limit is too_large.
func TestReadDecodedShapes(t *testing.T) {
	dir := t.TempDir()
	ws, err := OpenWorkspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := &Handlers{WS: ws}
	c := int64(agent.ChunkSize)
	for _, size := range []int64{0, 1, 10, 511, 512, 513, c - 1, c, c + 1, 2*c + 3} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*7 + 3)
		}
		name := fmt.Sprintf("f%d", size)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, maxSize := range []int64{0, 1, size - 1, size, size + 1, math.MaxInt64} {
			for _, off := range []int64{0, 1, size, size + 5} {
				for _, length := range []int64{0, 1, size, size + 1, maxSize, maxSize + 1} {
					for _, hash := range []bool{false, true} {
						if maxSize < 0 || length < 0 || length == math.MaxInt64 {
							continue
						}
						a := agent.ReadArgs{Path: name, MaxSize: maxSize, Offset: off, Length: length, Hash: hash}
						var held heldBytes
						res, err := h.ReadDecoded(context.Background(), a, &held)
						if maxSize > 0 && size > maxSize {
							if !errors.Is(err, agent.ErrTooLarge) {
								t.Errorf("%+v: %v, want too_large", a, err)
							}
							continue
						}
						if err != nil {
							t.Errorf("%+v: %v", a, err)
							continue
						}
						lo, hi := min(off, size), size
						if length > 0 {
							hi = min(size, lo+length)
						}
						want := data[lo:hi]
						r := res.(agent.ReadResult)
						if !bytes.Equal(held.b, want) || r.N != int64(len(want)) {
							t.Errorf("%+v: %d bytes (N %d), want %d", a, len(held.b), r.N, len(want))
						}
						if sum := sha256.Sum256(want); hash && r.SHA256 != hex.EncodeToString(sum[:]) {
							t.Errorf("%+v: sum %s, want %x", a, r.SHA256, sum)
						}
					}
				}
			}
		}
	}
}

// TestReadDecodedGrowing: a file that grows while it is read (after its size was
// checked) is never read past its first maxSize bytes, from any offset: such a read
// is too_large; one whose length stays within the limit reads what it asked.
func TestReadDecodedGrowing(t *testing.T) {
	dir := t.TempDir()
	ws, err := OpenWorkspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := &Handlers{WS: ws}
	c := int64(agent.ChunkSize)
	for _, tc := range []struct {
		size, grow, maxSize, off, length int64
		tooLarge                         bool
	}{
		{2 * c, 1, 2 * c, 0, 0, true},
		{2 * c, c, 2 * c, 0, 3 * c, true},
		{2 * c, 1, 2 * c, 0, 2 * c, false}, // asks no more than the limit
		{2 * c, 5, 2 * c, 10, 0, true},     // from an offset: still the file's first maxSize bytes
		{2 * c, 20, 2 * c, c, 0, true},
		{c + 1, 1, c + 1, 0, 0, true},
		{2 * c, 1, 4 * c, 0, 0, false},     // grows, but stays within the limit
		{2 * c, 9, 2 * c, 3 * c, 0, false}, // an offset past the limit and the file: nothing to read
		{2 * c, 1, math.MaxInt64, 0, 0, false},
	} {
		name := filepath.Join(dir, "grows")
		if err := os.WriteFile(name, make([]byte, tc.size), 0o644); err != nil {
			t.Fatal(err)
		}
		held := heldBytes{grow: func() {
			f, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = f.Write(make([]byte, tc.grow))
			f.Close()
		}}
		a := agent.ReadArgs{Path: "grows", MaxSize: tc.maxSize, Offset: tc.off, Length: tc.length}
		_, err := h.ReadDecoded(context.Background(), a, &held)
		if len(held.b) > 0 && tc.off+int64(len(held.b)) > tc.maxSize {
			t.Errorf("%+v: read up to byte %d, past maxSize %d", tc, tc.off+int64(len(held.b)), tc.maxSize)
		}
		if got := errors.Is(err, agent.ErrTooLarge); got != tc.tooLarge {
			t.Errorf("%+v: %v, want too_large %v", tc, err, tc.tooLarge)
		}
	}
}
