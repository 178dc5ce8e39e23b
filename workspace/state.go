package workspace

import (
	"context"

	"github.com/cwsdev/cws/auth"
)

// SessionState reads key of a session's per-session state (tool.Env.State: the vscode
// toolset's editor state) for caller, who needs tools:read. An empty id is the caller's
// default session, created on first use as CallDefault does. It returns the session's
// id and the value (nil when unset).
func (s *Service) SessionState(ctx context.Context, caller Caller, id, key string) (string, []byte, error) {
	if err := caller.need(auth.ScopeToolsRead, "session state"); err != nil {
		return "", nil, err
	}
	var sess *Session
	var err error
	if id == "" {
		sess, err = s.defaultSession(ctx, caller)
	} else {
		sess, err = s.getSession(ctx, caller, id)
	}
	if err != nil {
		return "", nil, err
	}
	v, err := s.cfg.Store.GetState(ctx, sess.Tenant, sess.ID, key)
	return sess.ID, v, err
}
