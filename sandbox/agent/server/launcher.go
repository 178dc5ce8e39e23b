package server

import (
	"errors"
	"io"
	"os"
	"os/exec"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/launch"
)

// prepared is a command ready to start, directly or through the launcher.
type prepared struct {
	*exec.Cmd
	// status is the read end of the launcher's status pipe (nil when not launched);
	// statusW is the launcher's end, closed here once it started.
	status, statusW *os.File
	// unenforced: the command has an ExecPolicy that Landlock could not enforce.
	unenforced bool
}

// launchThrough routes cmd through the launcher when p restricts what it may execute.
// Without Landlock (or without a launcher) the command runs unenforced, or is refused
// when p requires enforcement.
func (s *Server) launchThrough(cmd *exec.Cmd, p *agent.ExecPolicy) (*prepared, error) {
	return s.launchVia(cmd, p, true)
}

// launchVia is launchThrough; withStatus false leaves out the status pipe, for callers
// that start the command themselves (the terminal's interpreter): a launcher failure is
// then the command's non-zero exit, with the reason on its stderr.
func (s *Server) launchVia(cmd *exec.Cmd, p *agent.ExecPolicy, withStatus bool) (*prepared, error) {
	pc := &prepared{Cmd: cmd}
	if p == nil {
		return pc, nil
	}
	if s.landlock == 0 {
		if p.Require {
			return nil, agent.Errorf(agent.CodeNotEnforced, "",
				"Landlock is unavailable in this sandbox, and the policy requires it (requireLandlock): "+
					"commands can't be started. Run cws on a Linux kernel with Landlock enabled (5.13+, \"landlock\" in the lsm= boot list), "+
					"or drop requireLandlock to run them unenforced")
		}
		pc.unenforced = true
		return pc, nil
	}
	argv := cmd.Args
	if !withStatus {
		cmd.Args = append([]string{s.cfg.Launcher}, launch.Args(p, s.ws.dir, cmd.Path, argv, false)...)
		cmd.Path = s.cfg.Launcher
		return pc, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Args = append([]string{s.cfg.Launcher}, launch.Args(p, s.ws.dir, cmd.Path, argv, true)...)
	cmd.Path = s.cfg.Launcher
	cmd.ExtraFiles = []*os.File{w} // fd launch.StatusFD
	pc.status, pc.statusW = r, w
	return pc, nil
}

// start starts the command and, when it goes through the launcher, waits until the
// launcher has exec'd it: a launcher failure (Landlock refused, the program not
// executable) is a start error, and the launcher is reaped.
func (pc *prepared) start() error {
	if pc.status == nil {
		return pc.Cmd.Start()
	}
	defer pc.status.Close()
	err := pc.Cmd.Start()
	pc.statusW.Close()
	if err != nil {
		return err
	}
	msg, _ := io.ReadAll(io.LimitReader(pc.status, 4096))
	if len(msg) == 0 {
		return nil
	}
	_ = pc.Cmd.Wait()
	return errors.New(string(msg))
}
