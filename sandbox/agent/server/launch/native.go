package launch

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// NativeName is the file name of the native launcher: a small static C program
// (sandbox/agent/launcher/cws-launch.c, `make build` makes bin/cws-launch) that does
// what `cws-agent launch -ruleset-fd N -status-fd M -- FILE ARGV…` does, and takes the
// same arguments. A command's start through it costs a fork and two execs, where the
// agent's own binary adds a Go runtime's start (measured on 2 cores: about 1 ms against
// 2.3 ms per start, 0.55 ms for a start with no launcher at all;
// `go test ./sandbox/agent/server/launch -bench ScopedStart`).
const NativeName = "cws-launch"

// Native returns the native launcher installed beside the agent binary agent, once it
// has proved itself: a scoped start of `agent version` through it, under rs, ran and
// exited 0. It returns agent itself when there is none, or when it fails that start
// (a launcher for another architecture, a broken copy), with the reason.
func Native(agent string, rs *Ruleset) (string, error) {
	p := filepath.Join(filepath.Dir(agent), NativeName)
	fi, err := os.Stat(p)
	if err != nil {
		return agent, err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return agent, fmt.Errorf("%s is not an executable file", p)
	}
	cmd := exec.Command(agent, "version")
	cmd.Env = []string{} // nothing of the agent's environment
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := rs.StartVia(p, cmd); err != nil {
		return agent, fmt.Errorf("%s: %w", p, err)
	}
	if err := cmd.Wait(); err != nil {
		return agent, fmt.Errorf("%s: %s: %w: %s", p, strings.Join(cmd.Args, " "), err, strings.TrimSpace(out.String()))
	}
	return p, nil
}
