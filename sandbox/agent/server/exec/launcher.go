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
	// scoped: the command starts through the launcher in a scoped Landlock domain of
	// its own (Runner.Scope), under its policy's ruleset or the scope alone.
	scoped   bool
	scope    *launch.Ruleset
	launcher string
	// Unenforced: the command has an ExecPolicy that Landlock could not enforce.
	Unenforced bool
}

// LaunchThrough prepares cmd to start under p, which restricts what it may execute.
// Without Landlock (or with no Launcher configured) the command runs unenforced, or is
// refused when p requires enforcement. With the Runner's Scope, the command (with p
// or without) starts in a scoped domain of its own (Start).
func (rn *Runner) LaunchThrough(cmd *exec.Cmd, p *agent.ExecPolicy) (*Prepared, error) {
	pc := &Prepared{Cmd: cmd}
	if rn.Scope != nil {
		pc.scoped, pc.scope, pc.launcher = true, rn.Scope, rn.Launcher
	}
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
//
// With a Runner's Scope (same-uid mode) every command, with a policy or without,
// starts through the launcher instead, which restricts itself (with the policy's
// ruleset, or the scope alone) and execs the command: no thread of the agent is ever
// in a command's domain (launch.Ruleset.StartVia).
func (pc *Prepared) Start() error {
	var err error
	switch {
	case pc.scoped && pc.policy == nil:
		err = pc.scope.StartVia(pc.launcher, pc.Cmd)
	case pc.scoped:
		err = pc.rulesets.StartVia(pc.launcher, pc.policy.Programs, pc.policy.Dirs, pc.exclude, pc.Cmd)
	case pc.policy == nil:
		return pc.Cmd.Start()
	default:
		err = pc.rulesets.Start(pc.policy.Programs, pc.policy.Dirs, pc.exclude, pc.Cmd.Start)
	}
	if pe, ok := errors.AsType[*os.PathError](err); ok && pe.Op == "fork/exec" {
		return fmt.Errorf("exec %s: %w", pc.Args[0], pe.Err)
	}
	return err
}

// StartScoped starts cmd as a tool process the way Prepared.Start does without a
// policy: through the launcher in a scoped domain of its own when the Runner has a
// Scope, else as it is. For processes not made by Command (language servers).
func (rn *Runner) StartScoped(cmd *exec.Cmd) error {
	if rn.Scope == nil {
		return cmd.Start()
	}
	return rn.Scope.StartVia(rn.Launcher, cmd)
}
