package op

import (
	"unicode/utf8"

	"github.com/cwsdev/cws/sandbox/agent"
)

// An operation whose answer grows with the workspace (list, search, lsp) keeps what it
// adds within AnswerBudget and says what it left out (see server/answer.go).

// AnswerBudget is how many bytes of JSON a growing answer may hold: the frame header's
// limit, less room for the frame's own fields and the answer's fixed ones.
const AnswerBudget = agent.MaxHeader - 64<<10

// Budget counts down the encoded bytes an answer may still hold as entries are added.
type Budget struct {
	left int
	full bool
}

// NewBudget returns a Budget of AnswerBudget bytes.
func NewBudget() *Budget { return &Budget{left: AnswerBudget} }

// Take reserves n bytes and reports whether they fit. Once one entry does not, none
// after it does either, so what an answer keeps is a prefix of what it found.
func (b *Budget) Take(n int) bool {
	if b.full || n > b.left {
		b.full = true
		return false
	}
	b.left -= n
	return true
}

// JSONLen is the length of s encoded as a JSON string by encoding/json, without the
// quotes: control characters, <, > and & become \u00XX, and U+2028 and U+2029 \u2028.
func JSONLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			n++
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			n += 5
		case c == 0xE2 && i+2 < len(s) && s[i+1] == 0x80 && (s[i+2] == 0xA8 || s[i+2] == 0xA9):
			n += 3 // 3 bytes become 6
		}
	}
	if !utf8.ValidString(s) { // an invalid byte becomes \ufffd, 6 bytes for 1
		for i := 0; i < len(s); i++ {
			if s[i] >= utf8.RuneSelf {
				n += 5
			}
		}
	}
	return n
}
