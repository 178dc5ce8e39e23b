package workspace

import (
	"context"
	"errors"
	"fmt"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/policy"
)

// effectivePolicy is the tenant's policy narrowed by the workspace's .cws-policy.json,
// read through the agent and cached per session for PolicyTTL. A workspace file that
// cannot be parsed fails every call closed: ignoring it would widen the policy.
func (s *Service) effectivePolicy(ctx context.Context, c *call, tenant *policy.Policy) (*policy.Effective, error) {
	now := s.cfg.Now()
	s.mu.Lock()
	cp, ok := s.policies[c.sess.ID]
	s.mu.Unlock()
	if ok && now.Sub(cp.at) < s.cfg.PolicyTTL {
		return cp.eff, cp.err
	}
	data, _, err := c.agent.ReadFile(ctx, agent.ReadArgs{Path: policy.FileName, MaxSize: policy.MaxPolicyBytes})
	var ws *policy.Policy
	switch {
	case errors.Is(err, agent.ErrNotFound):
		err = nil // no workspace file: the tenant's policy as it is
	case errors.Is(err, agent.ErrIsDir), errors.Is(err, agent.ErrTooLarge):
		err = &policy.Violation{Err: ErrPolicy, Rule: "workspacePolicy", Path: policy.FileName,
			Detail: fmt.Sprintf("the workspace's %s is not a policy file (%v): remove it", policy.FileName, err)}
	case err != nil:
		return nil, mapAgentError(err)
	default:
		ws, err = policy.ParseWorkspace(data)
		if err != nil {
			err = &policy.Violation{Err: ErrPolicy, Rule: "workspacePolicy", Path: policy.FileName,
				Detail: fmt.Sprintf("the workspace's %s is invalid (%v): fix it or remove it", policy.FileName, err)}
		}
	}
	var eff *policy.Effective
	if err == nil {
		eff = tenant.Narrow(ws)
	}
	s.mu.Lock()
	s.policies[c.sess.ID] = cachedPolicy{eff: eff, err: err, at: now}
	s.mu.Unlock()
	return eff, err
}

// policyChanged drops the cached policy after a tool wrote the policy file.
func (s *Service) policyChanged(sessionID string) {
	s.mu.Lock()
	delete(s.policies, sessionID)
	s.mu.Unlock()
}
