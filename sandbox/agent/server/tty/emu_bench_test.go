package tty

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/charmbracelet/x/vt"
)

// BenchmarkEmulator measures the screen's cost per byte of plain output, by the lines
// of scrollback the emulator keeps.
func BenchmarkEmulator(b *testing.B) {
	line := append(bytes.Repeat([]byte("x"), 79), '\r', '\n')
	chunk := bytes.Repeat(line, 400)
	for _, n := range []int{0, 200, emuLines} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			e := vt.NewEmulator(80, 24)
			e.SetScrollbackSize(n)
			b.SetBytes(int64(len(chunk)))
			for b.Loop() {
				_, _ = e.Write(chunk)
			}
		})
	}
}
