package core

import (
	"context"
	"slices"

	"github.com/cwsdev/cws/sandbox/agent"
)

// gitHelperDirs are where git keeps the programs it runs itself (its --exec-path:
// remote helpers such as git-remote-https, dashed commands). A command that may run git
// may execute these; the launcher skips the ones an image lacks. git's script helpers
// still need their interpreter (sh), which stays refused unless allowed.
var gitHelperDirs = []string{"/usr/lib/git-core", "/usr/libexec/git-core"}

// execPolicy returns what a command started for this call, and everything it starts in
// turn, may execute: the effective allowedCommands plus extraPrograms (what a tool
// runs by itself, e.g. "git" for the git tools), for the agent's launcher to enforce
// with Landlock. It is nil, nothing enforced, when allowedCommands is omitted on both
// sides of the policy: every program is allowed then.
func (c *call) execPolicy(extraPrograms ...string) *agent.ExecPolicy {
	allowed := c.pol.AllowedCommands()
	if allowed == nil {
		return nil
	}
	p := &agent.ExecPolicy{Programs: []string{}, Require: c.pol.RequireLandlock()}
	for _, name := range append(allowed, extraPrograms...) {
		if !slices.Contains(p.Programs, name) {
			p.Programs = append(p.Programs, name)
		}
	}
	if slices.Contains(p.Programs, "git") {
		p.Dirs = slices.Clone(gitHelperDirs)
	}
	return p
}

// exec runs a command through the session's agent and counts it when its exec policy
// went unenforced (no Landlock in the sandbox).
func (c *call) exec(ctx context.Context, a agent.ExecArgs, stdin []byte, onOut agent.EventFunc) (agent.ExecResult, error) {
	r, err := c.agent.Exec(ctx, a, stdin, onOut)
	if err == nil && r.Unenforced {
		c.env.ExecUnenforced()
	}
	return r, err
}
