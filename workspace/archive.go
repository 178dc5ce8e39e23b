package workspace

import (
	"context"
	"errors"
	"io"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
)

// maxUpload bounds the file contents one archive upload may hold.
const maxUpload = 4 << 30

// direct prepares a call-less read of a session (the REST diff): its agent and
// effective policy. It needs tools:read, as the gitDiff tool does, and the policy's
// path rules apply.
func (s *Service) direct(ctx context.Context, caller Caller, id string) (*call, error) {
	if err := caller.need(auth.ScopeToolsRead, "the diff"); err != nil {
		return nil, err
	}
	sess, _, err := s.session(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	tp, _ := s.cfg.Tenants.Policy(caller.Tenant)
	c := &call{svc: s, sess: sess, caller: caller, agent: s.agentFor(sess.Sandbox), tool: "diff"}
	eff, err := s.effectivePolicy(ctx, c, tp)
	if err != nil {
		return nil, err
	}
	g := eff.Guard()
	c.pol, c.guard = eff, &g
	return c, nil
}

// archiveAgent returns the agent of caller's session id for an archive transfer, which
// needs the archive scope. deniedPaths, allowedPaths and the protected files guard the
// agent's tools; the archive is the platform's (or CI's) and moves the whole tree, .git
// and .cws-policy.json included. The agent still resolves every entry beneath the
// workspace (traversal) and the upload is bounded (maxUpload).
func (s *Service) archiveAgent(ctx context.Context, caller Caller, id, what string) (*agent.Client, error) {
	if err := caller.need(auth.ScopeArchive, what); err != nil {
		return nil, err
	}
	sess, _, err := s.session(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	return s.agentFor(sess.Sandbox), nil
}

// wholeTree is the archive's guard: the zero Guard allows every path.
var wholeTree = guard.Guard{}

// Download streams the whole workspace as a tar archive into w. It needs the archive
// scope; nothing is written to w when it is refused.
func (s *Service) Download(ctx context.Context, caller Caller, id string, w io.Writer) error {
	a, err := s.archiveAgent(ctx, caller, id, "downloading the archive")
	if err != nil {
		return err
	}
	g := wholeTree
	_, err = a.TarOut(ctx, agent.TarOutArgs{Path: ".", Guard: &g}, w)
	return mapAgentError(err)
}

// UploadResult counts what an upload extracted.
type UploadResult = agent.TarResult

// Upload extracts a tar archive into the workspace. It needs the archive scope; entries
// may be any path beneath the workspace, .git and .cws-policy.json included.
func (s *Service) Upload(ctx context.Context, caller Caller, id string, archive io.Reader) (UploadResult, error) {
	a, err := s.archiveAgent(ctx, caller, id, "uploading an archive")
	if err != nil {
		return UploadResult{}, err
	}
	g := wholeTree
	done := s.writing(id)
	res, err := a.TarIn(ctx, agent.TarInArgs{Path: ".", MaxBytes: maxUpload, Guard: &g}, archive)
	done()
	s.policyChanged(id) // it may have brought a .cws-policy.json
	if err != nil {
		return res, mapAgentError(err)
	}
	return res, nil
}

// Diff returns the session's changes since its last commit as a git patch (Config.Diff,
// core.Diff), denied paths left out. It needs tools:read.
func (s *Service) Diff(ctx context.Context, caller Caller, id string) (string, error) {
	c, err := s.direct(ctx, caller, id)
	if err != nil {
		return "", err
	}
	if s.cfg.Diff == nil {
		return "", errors.New("this server has no diff") // its configuration: no retry helps
	}
	d, err := s.cfg.Diff(ctx, c)
	if err != nil {
		return "", mapAgentError(err)
	}
	return d, nil
}
