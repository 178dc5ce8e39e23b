package workspace

import (
	"errors"

	"github.com/cwsdev/cws/workspace/policy"
)

// Domain errors. Each protocol maps them in one place (api/errors.go for HTTP,
// api/mcp for JSON-RPC codes). Compare with errors.Is.
var (
	ErrNotFound    = errors.New("not found")
	ErrConflict    = errors.New("already exists")
	ErrQuota       = policy.ErrQuota
	ErrRateLimited = errors.New("rate limit exceeded")
	ErrUnavailable = errors.New("temporarily unavailable")
	ErrForbidden   = errors.New("forbidden")
	// ErrSessionLost: the session's sandbox was removed behind cws's back (its
	// container is gone), so its files are gone too. The session is never recreated
	// under the same id; the caller starts a new one.
	ErrSessionLost = errors.New("session lost: its sandbox was removed")
	// ErrIncompatible: the session's sandbox runs an agent that speaks another protocol
	// than this server. Retrying cannot help; the caller starts a new session.
	ErrIncompatible = errors.New("the session's sandbox runs an incompatible agent")
	// ErrNotConfigured: the server was not set up for what was asked (no snapshot
	// store, a driver that can't suspend). Retrying cannot help; its operator can.
	ErrNotConfigured = errors.New("not configured on this server")
	// ErrNoListener: nothing listens on the workspace port a preview asked for.
	ErrNoListener = errors.New("nothing is listening on the port")

	// The policy's errors, one per code of the seed's catalogue.
	ErrInvalid   = policy.ErrInvalid   // -32602
	ErrTraversal = policy.ErrTraversal // -32001
	ErrPolicy    = policy.ErrPolicy    // -32002
	ErrTooLarge  = policy.ErrTooLarge  // -32003
	ErrCommand   = policy.ErrCommand   // -32004
	ErrConfirm   = policy.ErrConfirm   // -32005
)

// Kinds are the domain's error kinds: every error a Service returns matches one of
// them (or is a cancellation, a deadline or an internal fault). The protocols' tables
// map each one, and their tests walk this list.
var Kinds = []error{ErrNotFound, ErrConflict, ErrQuota, ErrRateLimited, ErrUnavailable, ErrForbidden, ErrSessionLost,
	ErrIncompatible, ErrNotConfigured, ErrNoListener, ErrInvalid, ErrTraversal, ErrPolicy, ErrTooLarge, ErrCommand, ErrConfirm}

// Retryable reports whether the same call, made again unchanged, may succeed: only a
// sandbox, an agent or a store that did not answer (ErrUnavailable, an *Interrupted
// command). Protocols say "retry" for these and for nothing else; a request or an
// answer over a size limit, a refusal or a lost session fails the same way every time.
func Retryable(err error) bool { return errors.Is(err, ErrUnavailable) }

// Interrupted is a command whose connection to its sandbox broke before it answered.
// Commands are never run again behind the caller's back; Started says whether it had
// begun (it was then stopped). It matches ErrUnavailable: the caller may retry it if
// running it again is safe.
type Interrupted struct {
	Started bool
}

func (e *Interrupted) Error() string {
	if e.Started {
		return "the connection to the workspace broke while the command ran: it had started and was stopped; it was not run again"
	}
	return "the connection to the workspace broke before the command started: it did not run"
}

func (e *Interrupted) Unwrap() error { return ErrUnavailable }
