package core

import (
	"context"

	"github.com/cwsdev/cws/sandbox/agent"
)

// execPolicy returns what a command started for this call, and everything it starts in
// turn, may execute (policy.Effective.Launch).
func (c *call) execPolicy(extraPrograms ...string) *agent.ExecPolicy {
	return c.pol.Launch(extraPrograms...)
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
