package server

import (
	"fmt"

	"github.com/cwsdev/cws/sandbox/agent"
)

// No answer is too big to send. An answer travels in one done frame: its JSON result in
// the header (agent.MaxHeader), its bulk bytes in the body (agent.MaxBody). An operation
// whose answer grows with the workspace (list, search, lsp) keeps what it adds within
// op.AnswerBudget and says what it left out; whatever still would not fit is refused as
// a CodeTooLarge error naming the limit (doneFrame), never a broken stream the host
// would take for an agent that is down.

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
