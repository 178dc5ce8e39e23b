package lsp

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent"
)

func TestPositionRoundTrip(t *testing.T) {
	// Each case puts the symbol "Sym" somewhere and gives where it is at the API
	// (1-based code points) and on the wire in each encoding (0-based units).
	tests := []struct {
		name         string
		src          string
		api          Pos
		u8, u16, u32 int // the character on the wire; the line is api.Line-1
	}{
		{"ascii", "package a\nvar Sym = 1\n", Pos{2, 5}, 4, 4, 4},
		{"non-ascii before", "// héllo\nx := \"é\"; Sym()\n", Pos{2, 11}, 11, 10, 10},
		{"emoji before (surrogate pair)", "// héllo 🎉 world Sym\n", Pos{1, 18}, 21, 18, 17},
		{"tabs", "func f() {\n\t\tSym()\n}\n", Pos{2, 3}, 2, 2, 2},
		{"crlf", "line one\r\n  Sym\r\n", Pos{2, 3}, 2, 2, 2},
		{"last line without newline", "a\nb\n🎉Sym", Pos{3, 2}, 4, 2, 1},
		{"cjk", "名前 := Sym", Pos{1, 7}, 10, 6, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			txt := NewText([]byte(tc.src))
			for enc, want := range map[Encoding]int{UTF8: tc.u8, UTF16: tc.u16, UTF32: tc.u32} {
				got, err := txt.ToLSP(tc.api, enc)
				if err != nil {
					t.Fatalf("%s: %v", enc, err)
				}
				if got != (Position{tc.api.Line - 1, want}) {
					t.Errorf("%s: ToLSP(%v) = %v, want {%d %d}", enc, tc.api, got, tc.api.Line-1, want)
				}
				if back := txt.FromLSP(got, enc); back != tc.api {
					t.Errorf("%s: FromLSP(%v) = %v, want %v", enc, got, back, tc.api)
				}
				// The symbol really starts there.
				l := txt.line(tc.api.Line - 1)
				if enc == UTF8 && string(l[want:want+3]) != "Sym" {
					t.Errorf("byte %d of line %q is not Sym", want, l)
				}
			}
		})
	}
}

func TestPositionEnds(t *testing.T) {
	txt := NewText([]byte("ab\r\nc🎉\n"))
	if txt.Lines() != 3 {
		t.Fatalf("lines = %d, want 3 (the empty last line is the end of file)", txt.Lines())
	}
	// End of line 1 is after "b", not after "\r".
	if p, err := txt.ToLSP(Pos{1, 3}, UTF16); err != nil || p != (Position{0, 2}) {
		t.Errorf("end of CRLF line: %v %v", p, err)
	}
	if p, err := txt.ToLSP(Pos{2, 3}, UTF16); err != nil || p != (Position{1, 3}) {
		t.Errorf("end of emoji line: %v %v", p, err)
	}
	if p, err := txt.ToLSP(Pos{3, 1}, UTF16); err != nil || p != (Position{2, 0}) {
		t.Errorf("end of file: %v %v", p, err)
	}
	// A server position inside a surrogate pair rounds down to the emoji; past the end
	// of a line or the file is clamped.
	if p := txt.FromLSP(Position{1, 2}, UTF16); p != (Pos{2, 2}) {
		t.Errorf("inside surrogate pair: %v", p)
	}
	if p := txt.FromLSP(Position{1, 99}, UTF16); p != (Pos{2, 3}) {
		t.Errorf("past line end: %v", p)
	}
	if p := txt.FromLSP(Position{9, 0}, UTF16); p != (Pos{3, 1}) {
		t.Errorf("past file end: %v", p)
	}
	if p := txt.FromLSP(Position{0, 3}, UTF16); p != (Pos{1, 3}) {
		t.Errorf("at the CR: %v", p)
	}
}

func TestPositionOutOfRange(t *testing.T) {
	txt := NewText([]byte("one\ntwo🎉\nthree"))
	tests := []struct {
		name string
		p    Pos
		data string
	}{
		{"line 0", Pos{0, 1}, `{"line":{"min":1,"max":3}}`},
		{"line past end", Pos{4, 1}, `{"line":{"min":1,"max":3}}`},
		{"character 0", Pos{2, 0}, `{"line":{"min":1,"max":3},"character":{"min":1,"max":5}}`},
		{"character past end", Pos{2, 6}, `{"line":{"min":1,"max":3},"character":{"min":1,"max":5}}`},
		{"last line", Pos{3, 7}, `{"line":{"min":1,"max":3},"character":{"min":1,"max":6}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := txt.ToLSP(tc.p, UTF16)
			var we *agent.WireError
			if !errors.As(err, &we) || !errors.Is(err, agent.ErrInvalid) {
				t.Fatalf("err = %v, want an invalid wire error", err)
			}
			var got, want any
			_ = json.Unmarshal(we.Data, &got)
			_ = json.Unmarshal([]byte(tc.data), &want)
			if gb, _ := json.Marshal(got); string(gb) != mustJSON(want) {
				t.Errorf("data = %s, want %s", we.Data, tc.data)
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
