// Package launch restricts what a command may execute, with Landlock: only the
// allowed programs (and what executing them takes: Grants) and the files beneath some
// directories. The restriction is inherited by every descendant and cannot be lifted,
// so an allowed program that starts another (git running a shell from an alias, a
// hook, a pager) is refused by the kernel.
//
// The agent restricts each command as it starts it, in its own process: a Cache keeps
// one Ruleset per policy, and Ruleset.Start forks the command from a thread of its own
// that the ruleset restricts first and that is never used again. No program runs in
// front of the command. Main, `cws-agent launch`, is the same restriction in a process
// that then execs the command: one command by hand, under a policy.
//
// Only execution is restricted: the ruleset handles LANDLOCK_ACCESS_FS_EXECUTE, and
// LANDLOCK_ACCESS_FS_REFER granted on "/" (a ruleset denies moving files between
// directories unless it grants REFER). Reads and writes stay unrestricted.
//
// When the agent shares the tools' uid (same-uid mode) the rulesets also scope their
// domains (signals, abstract unix sockets: scope.go) and fence the agent's own
// directories off from every write (fence.go), and a command without a policy gets a
// ruleset of the scopes and the fence alone; there every command starts through Main instead
// (Ruleset.StartVia, `launch -ruleset-fd`), so that no thread of the agent's is ever in
// a command's domain.
package launch

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"syscall"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"github.com/cwsdev/cws/sandbox/agent"
)

// Command is the agent's subcommand that runs Main.
const Command = "launch"

// ABI returns the kernel's Landlock ABI version, 0 when Landlock is unavailable
// (kernel without it, disabled at boot, or the syscall refused by seccomp).
func ABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// Main is `cws-agent launch [-p NAME]… [-d DIR]… [-x DIR] [-status-fd N] -- FILE ARGV0 ARGS…`:
// it restricts the process to executing the programs NAME (looked up on agent.SafePath)
// and the trees DIR, then execs FILE with ARGV0 ARGS… and the current environment.
// With -ruleset-fd N it restricts the process with the ruleset on descriptor N
// instead (what the agent hands over: Ruleset.StartVia).
// It returns only on failure, after writing the error to the status fd if one is given
// (close-on-exec: whoever started it reads EOF once the command runs).
func Main(args []string) error {
	var progs, dirs list
	fs := flag.NewFlagSet(Command, flag.ContinueOnError)
	fs.Var(&progs, "p", "a program name allowed to execute (repeatable)")
	fs.Var(&dirs, "d", "a tree whose files may execute (repeatable)")
	exclude := fs.String("x", "", "never grant files beneath this directory (the workspace)")
	statusFD := fs.Int("status-fd", -1, "report a failure on this file descriptor")
	rulesetFD := fs.Int("ruleset-fd", -1, "restrict with this Landlock ruleset (a descriptor handed over, Ruleset.StartVia) instead of -p, -d and -x")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var status *os.File
	if *statusFD >= 0 {
		syscall.CloseOnExec(*statusFD)
		status = os.NewFile(uintptr(*statusFD), "status")
	}
	var err error
	if *rulesetFD >= 0 {
		// The command must not inherit the ruleset: close-on-exec.
		syscall.CloseOnExec(*rulesetFD)
		if rest := fs.Args(); len(rest) < 2 {
			err = errors.New("usage: launch -ruleset-fd N -- FILE ARGV0 [ARGS…]")
		} else {
			err = (&Ruleset{fd: *rulesetFD}).Exec(rest[0], rest[1:], os.Environ())
		}
	} else {
		err = run(progs, dirs, *exclude, fs.Args())
	}
	if status != nil {
		fmt.Fprint(status, err)
	}
	return err
}

func run(progs, dirs []string, exclude string, rest []string) error {
	if len(rest) < 2 {
		return errors.New("usage: launch [-p NAME]… [-d DIR]… -- FILE ARGV0 [ARGS…]")
	}
	rs, err := NewRuleset(Grants(progs, agent.SafePath, exclude), dirs)
	if err != nil {
		return err
	}
	return rs.Exec(rest[0], rest[1:], os.Environ())
}

// list is a repeatable string flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }
