package fs

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
	"golang.org/x/sys/unix"
)

// maxCheckPaths bounds one check call.
const maxCheckPaths = 100_000

// Check answers which paths the guard refuses to show (agent.CheckArgs): the host runs
// git's name listing first, asks here, and excludes what is refused where git produces
// its output.
func (h *Handlers) Check(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.CheckArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	if len(a.Paths) > maxCheckPaths {
		return nil, agent.Errorf(agent.CodeInvalid, "", "at most %d paths per check", maxCheckPaths)
	}
	res := agent.CheckResult{Refused: []string{}}
	for _, p := range a.Paths {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if h.refused(p, &a) {
			res.Refused = append(res.Refused, p)
		}
	}
	return res, nil
}

func (h *Handlers) refused(p string, a *agent.CheckArgs) bool {
	if a.Guard == nil {
		return false
	}
	t, err := h.WS.Open(p, a.Guard, false)
	if err != nil {
		var we *agent.WireError
		// A name that does not resolve (a parent is a file now, a dangling link) is judged
		// by its name; anything else refuses.
		if errors.As(err, &we) || !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTDIR) {
			return true
		}
		return a.Guard.Check(p) != nil
	}
	if !Denies(a.Guard) {
		return false
	}
	var st unix.Stat_t
	f, err := h.WS.OpenReal(t.Real, unix.O_PATH, 0)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist) // swapped while checking: refuse
	}
	defer f.Close()
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return true
	}
	return linkRule(&st, p) != nil
}
