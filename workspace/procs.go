package workspace

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/tool"
)

// suspendedTail is how much of each stream of a background process a suspend keeps.
const suspendedTail = 64 << 10

// suspendedKept is how many ended-by-suspend processes a session remembers.
const suspendedKept = 32

// saveSuspendedProcs keeps the session's background processes, with the end of their
// output, in its State before its sandbox stops (tool.SuspendedProcsKey).
func (s *Service) saveSuspendedProcs(ctx context.Context, sess *Session) error {
	a := s.agentFor(sess.Sandbox)
	ps, err := a.ProcList(ctx)
	if err != nil || len(ps) == 0 {
		return err
	}
	var kept []tool.SuspendedProc
	if raw, err := s.cfg.Store.GetState(ctx, sess.Tenant, sess.ID, tool.SuspendedProcsKey); err == nil && raw != nil {
		_ = json.Unmarshal(raw, &kept)
	}
	now := s.cfg.Now().UTC()
	for _, p := range ps {
		sp := tool.SuspendedProc{Info: p}
		if o, err := a.ProcOutput(ctx, agent.ProcOutputArgs{ID: p.ID}); err == nil {
			sp.Info = o.Proc
			sp.Stdout, sp.StdoutStart = tail(o.Stdout, o.StdoutOffset)
			sp.Stderr, sp.StderrStart = tail(o.Stderr, o.StderrOffset)
		}
		if sp.Info.Running {
			sp.Info.Running = false
			sp.Info.EndedAt = &now
			sp.EndReason = tool.EndReasonSuspended
		}
		kept = append(slices.DeleteFunc(kept, func(k tool.SuspendedProc) bool { return k.Info.ID == p.ID }), sp)
	}
	if len(kept) > suspendedKept {
		kept = kept[len(kept)-suspendedKept:]
	}
	raw, err := json.Marshal(kept)
	if err != nil {
		return err
	}
	return s.cfg.Store.PutState(ctx, sess.Tenant, sess.ID, tool.SuspendedProcsKey, raw)
}

// tail keeps the last suspendedTail bytes of out, which ends at offset end, and says
// where they begin.
func tail(out []byte, end int64) ([]byte, int64) {
	if len(out) > suspendedTail {
		out = out[len(out)-suspendedTail:]
	}
	return out, end - int64(len(out))
}
