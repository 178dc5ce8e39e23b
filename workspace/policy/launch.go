package policy

import (
	"slices"

	"github.com/cwsdev/cws/sandbox/agent"
)

// gitHelperDirs are where git keeps the programs it runs itself (its --exec-path:
// remote helpers such as git-remote-https, dashed commands). A command that may run git
// may execute these; the launcher skips the ones an image lacks. git's script helpers
// still need their interpreter (sh), which stays refused unless allowed.
var gitHelperDirs = []string{"/usr/lib/git-core", "/usr/libexec/git-core"}

// Launch returns what a command started for a call, and everything it starts in turn,
// may execute: AllowedCommands plus extraPrograms (what a tool runs by itself, e.g.
// "git" for the git tools), for the agent's launcher to enforce with Landlock. It is
// nil, nothing enforced, when allowedCommands is omitted on both sides: every program
// is allowed then.
func (e *Effective) Launch(extraPrograms ...string) *agent.ExecPolicy {
	allowed := e.AllowedCommands()
	if allowed == nil {
		return nil
	}
	p := &agent.ExecPolicy{Programs: []string{}, Require: e.RequireLandlock()}
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
