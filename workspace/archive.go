package workspace

import (
	"context"
	"io"
	"slices"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/policy"
)

// maxUpload bounds the file contents one archive upload may hold.
const maxUpload = 4 << 30

// direct prepares a call-less operation on a session: its agent and effective policy.
func (s *Service) direct(ctx context.Context, caller Caller, id string) (*call, error) {
	sess, err := s.session(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	tp, _ := s.cfg.Tenants.Policy(caller.Tenant)
	c := &call{svc: s, sess: sess, caller: caller, agent: s.agentFor(sess.Sandbox)}
	eff, err := s.effectivePolicy(ctx, c, tp)
	if err != nil {
		return nil, err
	}
	g := eff.Guard()
	c.pol, c.guard = eff, &g
	return c, nil
}

// Download streams the workspace as a tar archive into w. Denied paths are left out.
func (s *Service) Download(ctx context.Context, caller Caller, id string, w io.Writer) error {
	c, err := s.direct(ctx, caller, id)
	if err != nil {
		return err
	}
	_, err = c.agent.TarOut(ctx, agent.TarOutArgs{Path: ".", Guard: c.guard}, w)
	return mapAgentError(err)
}

// UploadResult counts what an upload extracted.
type UploadResult = agent.TarResult

// Upload extracts a tar archive into the workspace. Paths are checked like writeFile's.
func (s *Service) Upload(ctx context.Context, caller Caller, id string, archive io.Reader) (UploadResult, error) {
	c, err := s.direct(ctx, caller, id)
	if err != nil {
		return UploadResult{}, err
	}
	// Uploads bring whole repositories, .git/config included: the git-protected paths
	// guard the file tools, not the archive (the container stays the boundary).
	g := *c.guard
	g.Protect = slices.DeleteFunc(slices.Clone(g.Protect), func(p string) bool { return slices.Contains(policy.GitProtected, p) })
	res, err := c.agent.TarIn(ctx, agent.TarInArgs{Path: ".", MaxBytes: maxUpload, Guard: &g}, archive)
	s.policyChanged(id)
	if err != nil {
		return res, mapAgentError(err)
	}
	return res, nil
}
