package lsp

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/cwsdev/cws/sandbox/agent"
)

// Encoding is how LSP counts a position's character: the protocol's default is UTF-16
// code units; a server may agree to UTF-8 bytes or UTF-32 code points at initialize.
type Encoding string

// The position encodings of LSP 3.17.
const (
	UTF8  Encoding = "utf-8"
	UTF16 Encoding = "utf-16"
	UTF32 Encoding = "utf-32"
)

// Pos is a position at the API: 1-based line, 1-based character counted in Unicode code
// points (an invalid UTF-8 byte counts as one). Character len+1 is the end of a line.
type Pos struct {
	Line      int `json:"line"`
	Character int `json:"character"`
}

// Span is a range at the API, in Pos form.
type Span struct {
	Start Pos `json:"start"`
	End   Pos `json:"end"`
}

// Position is a position on the wire to a server: 0-based line and character in the
// negotiated encoding.
type Position struct {
	Line      int `json:"line"`
	Character int `json:"character"`
}

// Range is a range on the wire to a server.
type Range struct {
	Start Position `json:"start"`
	End   Position `json:"end"`
}

// Text indexes a file's content by line for exact position conversion. Lines end at "\n";
// a "\r" before it belongs to the terminator, not the line (CRLF files). A file that ends
// with "\n" has one more, empty, line: the end of the file.
type Text struct {
	src   []byte
	lines [][2]int // each line's [start, end) byte offsets, terminator excluded
}

// NewText indexes src.
func NewText(src []byte) *Text {
	t := &Text{src: src}
	start := 0
	for i, b := range src {
		if b == '\n' {
			end := i
			if end > start && src[end-1] == '\r' {
				end--
			}
			t.lines = append(t.lines, [2]int{start, end})
			start = i + 1
		}
	}
	t.lines = append(t.lines, [2]int{start, len(src)})
	return t
}

// Lines is how many lines the text has (at least 1).
func (t *Text) Lines() int { return len(t.lines) }

func (t *Text) line(i int) []byte { return t.src[t.lines[i][0]:t.lines[i][1]] }

// Chars is how many characters (code points) line n (1-based) has.
func (t *Text) Chars(n int) int { return utf8.RuneCount(t.line(n - 1)) }

// ToLSP converts an API position to the server's. A line or character out of the text is
// an invalid-argument error whose Data gives the valid ranges.
func (t *Text) ToLSP(p Pos, enc Encoding) (Position, error) {
	if p.Line < 1 || p.Line > len(t.lines) {
		return Position{}, t.outOfRange(p, "line %d is outside the file (lines 1..%d)", p.Line, len(t.lines))
	}
	l := t.line(p.Line - 1)
	n := utf8.RuneCount(l)
	if p.Character < 1 || p.Character > n+1 {
		return Position{}, t.outOfRange(p, "character %d is outside line %d (characters 1..%d; %d is the end of the line)", p.Character, p.Line, n+1, n+1)
	}
	units := 0
	for i, rest := 0, l; i < p.Character-1; i++ {
		r, size := utf8.DecodeRune(rest)
		rest = rest[size:]
		units += width(r, size, enc)
	}
	return Position{Line: p.Line - 1, Character: units}, nil
}

// FromLSP converts a server's position to the API's. Servers are trusted to point at the
// text they were given, but not blindly: a character inside a code point rounds down to
// it, and a position past a line's end or the file's end is clamped to that end.
func (t *Text) FromLSP(p Position, enc Encoding) Pos {
	if p.Line < 0 {
		return Pos{Line: 1, Character: 1}
	}
	if p.Line >= len(t.lines) {
		last := len(t.lines)
		return Pos{Line: last, Character: t.Chars(last) + 1}
	}
	l := t.line(p.Line)
	units, chars := 0, 0
	for rest := l; len(rest) > 0; chars++ {
		r, size := utf8.DecodeRune(rest)
		w := width(r, size, enc)
		if units+w > p.Character {
			break
		}
		units += w
		rest = rest[size:]
	}
	return Pos{Line: p.Line + 1, Character: chars + 1}
}

// SpanToLSP converts an API range.
func (t *Text) SpanToLSP(s Span, enc Encoding) (Range, error) {
	a, err := t.ToLSP(s.Start, enc)
	if err != nil {
		return Range{}, err
	}
	b, err := t.ToLSP(s.End, enc)
	if err != nil {
		return Range{}, err
	}
	return Range{Start: a, End: b}, nil
}

// SpanFromLSP converts a server's range.
func (t *Text) SpanFromLSP(r Range, enc Encoding) Span {
	return Span{Start: t.FromLSP(r.Start, enc), End: t.FromLSP(r.End, enc)}
}

// width is how many units of enc one decoded code point takes. An invalid byte (size 1,
// RuneError) is one unit everywhere: a server decoding the text sees U+FFFD or the byte.
func width(r rune, size int, enc Encoding) int {
	switch enc {
	case UTF8:
		return size
	case UTF32:
		return 1
	}
	if r >= 0x10000 {
		return 2 // a surrogate pair
	}
	return 1
}

// bounds is the Data of an out-of-range error.
type bounds struct {
	Line      minMax  `json:"line"`
	Character *minMax `json:"character,omitempty"`
}

type minMax struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

func (t *Text) outOfRange(p Pos, format string, a ...any) error {
	b := bounds{Line: minMax{1, len(t.lines)}}
	if p.Line >= 1 && p.Line <= len(t.lines) {
		b.Character = &minMax{1, t.Chars(p.Line) + 1}
	}
	data, _ := json.Marshal(b)
	return &agent.WireError{Code: agent.CodeInvalid, Message: "position out of bounds: " + fmt.Sprintf(format, a...), Data: data}
}
