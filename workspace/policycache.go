package workspace

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/policy"
)

// effectivePolicy is the tenant's policy narrowed by the workspace's .cws-policy.json,
// read through the agent and cached per session for PolicyTTL. Concurrent calls of a
// session whose cached policy is stale share one read. A workspace file that cannot be
// parsed fails every call closed: ignoring it would widen the policy.
func (s *Service) effectivePolicy(ctx context.Context, c *call, tenant *policy.Policy) (*policy.Effective, error) {
	now := s.cfg.Now()
	s.mu.Lock()
	cp, ok := s.policies[c.sess.ID]
	s.mu.Unlock()
	if ok && now.Sub(cp.at) < s.cfg.PolicyTTL {
		return cp.eff, cp.err
	}
	// The read is shared, so it must not end with one caller's cancellation; each
	// caller still stops waiting at its own.
	ch := s.policyReads.DoChan(c.sess.ID, func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), policyReadTimeout)
		defer cancel()
		return s.readPolicy(rctx, c, tenant, now)
	})
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		cp = r.Val.(cachedPolicy)
		return cp.eff, cp.err
	}
}

// policyReadTimeout bounds a shared read of the workspace policy.
const policyReadTimeout = 30 * time.Second

// readPolicy reads and parses the workspace's policy file and caches the outcome; an
// error is returned only when the agent could not be asked.
func (s *Service) readPolicy(ctx context.Context, c *call, tenant *policy.Policy, now time.Time) (cachedPolicy, error) {
	s.mu.Lock()
	gen := s.policyGen
	s.mu.Unlock()
	data, _, err := c.agent.ReadFile(ctx, agent.ReadArgs{Path: policy.FileName, MaxSize: policy.MaxPolicyBytes})
	var ws *policy.Policy
	switch {
	case errors.Is(err, agent.ErrNotFound):
		err = nil // no workspace file: the tenant's policy as it is
	case errors.Is(err, agent.ErrIsDir), errors.Is(err, agent.ErrTooLarge):
		err = &policy.Violation{Err: ErrPolicy, Rule: "workspacePolicy", Path: policy.FileName,
			Detail: fmt.Sprintf("the workspace's %s is not a policy file (%v): remove it", policy.FileName, err)}
	case err != nil:
		return cachedPolicy{}, mapAgentError(err)
	default:
		ws, err = policy.ParseWorkspace(data)
		if err != nil {
			err = &policy.Violation{Err: ErrPolicy, Rule: "workspacePolicy", Path: policy.FileName,
				Detail: fmt.Sprintf("the workspace's %s is invalid (%v): fix it or remove it", policy.FileName, err)}
		}
	}
	cp := cachedPolicy{err: err, at: now}
	if err == nil {
		cp.eff = tenant.Narrow(ws)
	}
	s.mu.Lock()
	if s.policyGen == gen { // else the file was written meanwhile: this read may be stale
		s.policies[c.sess.ID] = cp
	}
	s.mu.Unlock()
	return cp, nil
}

// policyChanged drops the cached policy after a tool wrote the policy file; a read in
// flight is not shared with later calls.
func (s *Service) policyChanged(sessionID string) {
	s.mu.Lock()
	delete(s.policies, sessionID)
	s.policyGen++
	s.mu.Unlock()
	s.policyReads.Forget(sessionID)
}
