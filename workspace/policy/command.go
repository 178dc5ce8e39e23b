package policy

import (
	"fmt"
	"slices"
	"strings"
)

// SafePath is the only PATH a command is resolved on, and the PATH it runs with. The
// agent looks the program name up here itself: never in the workspace, never on the
// caller's PATH (which CheckEnv refuses to set).
const SafePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// CheckCommand reports whether runCommand may start the program cmd.
//
// cmd must be a bare program name: anything with a "/" ("/usr/bin/python3",
// "./python3", "bin/python3") is refused with ErrCommand even when "python3" is
// allowed, because the allowlist names programs on SafePath, not files; a workspace
// binary can never be started this way. Names with spaces or control characters are
// refused too: arguments go in args, and commands run without a shell.
//
// If allowedCommands is set, cmd must equal one of its entries exactly. That is the
// only thing standing between a caller and a shell: "sh", "bash", "env", "xargs" …
// are refused unless listed. Listing one of them (or a program that runs others, like
// "find" with -exec, "make", or an interpreter) allows anything, which the tenant is
// free to decide. If allowedCommands is omitted on both sides, every
// bare name is allowed.
func (e *Effective) CheckCommand(cmd string) error {
	switch {
	case cmd == "":
		return &Violation{Err: ErrInvalid, Detail: "command is required"}
	case strings.Contains(cmd, "/"):
		return &Violation{Err: ErrCommand, Rule: "allowedCommands",
			Detail: fmt.Sprintf("command %q must be a bare program name, resolved on %s", cmd, SafePath)}
	case cmd == "." || cmd == ".." || strings.ContainsFunc(cmd, isSpaceOrControl):
		return &Violation{Err: ErrCommand, Rule: "allowedCommands",
			Detail: fmt.Sprintf("command %q is not a program name; pass arguments in args", cmd)}
	}
	for _, list := range e.commands {
		if !slices.Contains(list, cmd) {
			return &Violation{Err: ErrCommand, Rule: "allowedCommands",
				Detail: fmt.Sprintf("command %q is not in allowedCommands", cmd)}
		}
	}
	return nil
}
