package server

import (
	"fmt"
	"unicode/utf8"

	"github.com/cwsdev/cws/sandbox/agent"
)

// No answer is too big to send. An answer travels in one done frame: its JSON result in
// the header (agent.MaxHeader), its bulk bytes in the body (agent.MaxBody). An operation
// whose answer grows with the workspace (list, search, lsp) keeps what it adds within
// answerBudget and says what it left out; whatever still would not fit is refused as a
// CodeTooLarge error naming the limit (doneFrame), never a broken stream the host would
// take for an agent that is down.

// answerBudget is how many bytes of JSON a growing answer may hold: the frame header's
// limit, less room for the frame's own fields and the answer's fixed ones.
const answerBudget = agent.MaxHeader - 64<<10

// budget counts down the encoded bytes an answer may still hold as entries are added.
type budget struct {
	left int
	full bool
}

func newBudget() *budget { return &budget{left: answerBudget} }

// take reserves n bytes and reports whether they fit. Once one entry does not, none
// after it does either, so what an answer keeps is a prefix of what it found.
func (b *budget) take(n int) bool {
	if b.full || n > b.left {
		b.full = true
		return false
	}
	b.left -= n
	return true
}

// answerTooLarge is the error for an answer that cannot travel in one frame.
func answerTooLarge(header, body int) *agent.WireError {
	msg := fmt.Sprintf("the answer is about %d bytes, over the %d bytes one answer from the workspace may hold", header, agent.MaxHeader)
	if body > agent.MaxBody {
		msg = fmt.Sprintf("the answer carries %d bytes of data, over the %d bytes one answer from the workspace may carry", body, agent.MaxBody)
	}
	return &agent.WireError{Code: agent.CodeTooLarge, Rule: agent.RuleFrameSize, Message: msg + "; ask for less (a narrower path, fewer results)"}
}

// frameSlack is room for a done frame's own fields around its result.
const frameSlack = 4 << 10

// headerSize is about how many bytes the done frame's header will be, never less.
func headerSize(done *agent.Header) int {
	n := len(done.Result) + frameSlack
	if e := done.Error; e != nil {
		n += 6*(len(e.Message)+len(e.Path)+len(e.Rule)) + len(e.Data) // escaped at worst
	}
	return n
}

// fits reports whether a done frame with this header and body can be sent.
func fits(done *agent.Header, body []byte) bool {
	return headerSize(done) <= agent.MaxHeader && len(body) <= agent.MaxBody
}

// jsonLen is the length of s encoded as a JSON string by encoding/json, without the
// quotes: control characters, <, > and & become \u00XX, and U+2028 and U+2029 \u2028.
func jsonLen(s string) int {
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
