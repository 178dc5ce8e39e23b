package workspace

import (
	"errors"
	"fmt"

	"github.com/cwsdev/cws/sandbox/agent"
)

// ErrAgentUnresponsive: the session's workspace agent stopped answering (a ping, its
// handshake or the call went unanswered within its bound). The call ended without
// waiting for it, and cws is restarting the agent (see heal.go): the caller may retry
// shortly. It matches ErrUnavailable.
var ErrAgentUnresponsive = fmt.Errorf("%w: the workspace agent is not responding; cws is restarting it, retry shortly", ErrUnavailable)

// mapFault turns the faults of the path to a sandbox into the domain's errors: a
// removed sandbox (ErrSessionLost), a command whose stream broke (*Interrupted), and
// an agent that stopped answering (ErrAgentUnresponsive; a command's says as well
// whether it had started).
func mapFault(err error) (error, bool) {
	var ie *agent.InterruptedError
	switch {
	case errors.Is(err, ErrSessionLost):
		return err, true
	case errors.As(err, &ie):
		in := &Interrupted{Started: ie.Started}
		if errors.Is(err, agent.ErrUnresponsive) {
			return fmt.Errorf("%w: %w", ErrAgentUnresponsive, in), true
		}
		return in, true
	case errors.Is(err, agent.ErrUnresponsive):
		return fmt.Errorf("%w (%v)", ErrAgentUnresponsive, err), true
	}
	return nil, false
}
