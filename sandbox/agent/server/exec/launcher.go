package exec

import (
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/launch"
)

// Prepared is a command ready to start, restricted or not.
type Prepared struct {
	*exec.Cmd
	// policy, when not nil, is what the command may execute: start enforces it with
	// the ruleset rulesets keeps for it, which grants nothing beneath exclude (the
	// workspace).
	policy   *agent.ExecPolicy
	rulesets *launch.Cache
	exclude  string
	// Unenforced: the command has an ExecPolicy that Landlock could not enforce.
	Unenforced bool
}

// LaunchThrough prepares cmd to start under p, which restricts what it may execute.
// Without Landlock (or with no Launcher configured) the command runs unenforced, or is
// refused when p requires enforcement.
func (rn *Runner) LaunchThrough(cmd *exec.Cmd, p *agent.ExecPolicy) (*Prepared, error) {
	pc := &Prepared{Cmd: cmd}
	if p == nil {
		return pc, nil
	}
	if rn.Landlock == 0 {
		if p.Require {
			return nil, agent.Errorf(agent.CodeNotEnforced, "",
				"Landlock is unavailable in this sandbox, and the policy requires it (requireLandlock): "+
					"commands can't be started. Run cws on a Linux kernel with Landlock enabled (5.13+, \"landlock\" in the lsm= boot list), "+
					"or drop requireLandlock to run them unenforced")
		}
		pc.Unenforced = true
		return pc, nil
	}
	if cmd.SysProcAttr != nil && cmd.SysProcAttr.Pdeathsig != 0 {
		// It would come at once: when the thread that forked the command ends (start).
		return nil, errors.New("a command restricted by an exec policy can't have a parent-death signal")
	}
	pc.policy, pc.rulesets, pc.exclude = p, rn.Rulesets, rn.WS.Dir()
	return pc, nil
}

// Start starts the command, restricted to its policy when it has one: forked from a
// thread of the agent's that the policy's Landlock ruleset restricts first (the
// policy's rules are built once and kept, launch.Cache), so no program runs in front
// of it. A refusal (the program itself not allowed, a ruleset that can't be built) is
// a start error, worded as the launcher worded it.
func (pc *Prepared) Start() error {
	if pc.policy == nil {
		return pc.Cmd.Start()
	}
	err := pc.rulesets.Start(pc.policy.Programs, pc.policy.Dirs, pc.exclude, pc.Cmd.Start)
	if pe, ok := errors.AsType[*os.PathError](err); ok && pe.Op == "fork/exec" {
		return fmt.Errorf("exec %s: %w", pc.Args[0], pe.Err)
	}
	return err
}
