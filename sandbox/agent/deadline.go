package agent

import (
	"context"
	"errors"
	"time"
)

// How long the host waits for a call's answer (see Client.Call). A call never waits on
// the agent for longer, whatever its caller's context allows.
const (
	// DefaultCallTimeout bounds a call that carries no timeout of its own: a file's
	// write, a stat, a rename, starting a process.
	DefaultCallTimeout = time.Minute
	// WalkCallTimeout bounds the calls that walk a tree (search, list, check).
	WalkCallTimeout = 2 * time.Minute
	// LSPCallTimeout bounds a code-intelligence call; a language server's first start
	// may load the whole workspace.
	LSPCallTimeout = 3 * time.Minute
	// CallMargin is added to the timeout or wait a call carries: the agent enforces
	// that one itself and answers a moment later.
	CallMargin = 30 * time.Second
	// MaxCommandTimeout bounds a command (exec, term.run) that carries no timeout.
	MaxCommandTimeout = time.Hour
	// StreamIdleTimeout bounds a streamed read, archive or upload by how long it may move
	// nothing (its total length depends on its size and on the peer at the other end).
	StreamIdleTimeout = time.Minute
)

// timeoutCarrier is an operation's arguments that carry a timeout or a wait of their
// own: the call may take that long, and CallMargin more.
type timeoutCarrier interface {
	callTimeout() time.Duration
}

// callTimeout is how long a call of op with args may take in all; 0 leaves it to its
// idle bound (streamIdle).
func callTimeout(op string, args any) time.Duration {
	if t, ok := args.(timeoutCarrier); ok {
		return t.callTimeout()
	}
	switch op {
	case OpRead, OpTarOut, OpTarIn:
		return 0
	case OpTTYAttach: // a viewer stays as long as its host wants; Liveness finds a dead agent
		return 0
	case OpSearch, OpList, OpCheck:
		return WalkCallTimeout
	case OpLSP:
		return LSPCallTimeout
	}
	return DefaultCallTimeout
}

// streamIdle is how long a call of op may move nothing (no frame in or out), or 0 when
// only its total timeout bounds it.
func streamIdle(op string) time.Duration {
	switch op {
	case OpRead, OpTarOut, OpTarIn:
		return StreamIdleTimeout
	}
	return 0
}

func commandTimeout(ms, graceMS int64) time.Duration {
	if ms <= 0 {
		return MaxCommandTimeout + CallMargin
	}
	if graceMS <= 0 {
		graceMS = 2000
	}
	return time.Duration(ms+graceMS)*time.Millisecond + CallMargin
}

func (a ExecArgs) callTimeout() time.Duration       { return commandTimeout(a.TimeoutMS, a.GraceMS) }
func (a TermRunArgs) callTimeout() time.Duration    { return commandTimeout(a.TimeoutMS, 0) }
func (a ProcOutputArgs) callTimeout() time.Duration { return waitTimeout(a.WaitMS) }
func (a TermReadArgs) callTimeout() time.Duration   { return waitTimeout(a.WaitMS) }
func (a ProcKillArgs) callTimeout() time.Duration   { return waitTimeout(a.GraceMS) }

func waitTimeout(ms int64) time.Duration {
	return time.Duration(max(ms, 0))*time.Millisecond + CallMargin
}

// errCallTimeout is the cause of a context that withCallTimeout ended.
type errCallTimeout struct{ err error }

func (e errCallTimeout) Error() string { return e.err.Error() }
func (e errCallTimeout) Unwrap() error { return e.err }

// withCallTimeout bounds ctx by d (0: no bound); the context it returns ends with a
// cause that says the agent did not answer op in time (see ctxErr).
func withCallTimeout(ctx context.Context, op string, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, d, errCallTimeout{unresponsive("no answer to %s within %s", op, d)})
}

// ctxErr is why ctx ended: the call's own timeout (ErrUnresponsive), or ctx.Err().
func ctxErr(ctx context.Context) error {
	var t errCallTimeout
	if errors.As(context.Cause(ctx), &t) {
		return t.err
	}
	return ctx.Err()
}
