package workspace

import (
	"errors"

	"github.com/cwsdev/cws/sandbox/agent"
)

// mapFault turns the faults of the path to a sandbox into the domain's errors: a
// removed sandbox (ErrSessionLost) and a command whose stream broke (*Interrupted).
func mapFault(err error) (error, bool) {
	var ie *agent.InterruptedError
	switch {
	case errors.Is(err, ErrSessionLost):
		return err, true
	case errors.As(err, &ie):
		return &Interrupted{Started: ie.Started}, true
	}
	return nil, false
}
