// Package launch is the agent's launcher: `cws-agent launch`, the agent binary
// re-executed in front of a command, restricts itself with Landlock so that only the
// allowed programs (and what executing them takes) can be executed, then execs the
// command in the same process. The restriction is inherited by every descendant and
// cannot be lifted, so an allowed program that starts another (git running a shell from
// an alias, a hook, a pager) is refused by the kernel.
//
// Only execution is restricted: the ruleset handles LANDLOCK_ACCESS_FS_EXECUTE, and
// LANDLOCK_ACCESS_FS_REFER granted on "/" (a ruleset denies moving files between
// directories unless it grants REFER). Reads and writes stay unrestricted.
package launch

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"github.com/cwsdev/cws/sandbox/agent"
)

// Command is the agent's subcommand that runs Main.
const Command = "launch"

// StatusFD is the file descriptor on which the launcher reports why it could not exec
// the command. It is close-on-exec, so the parent reads EOF once the command runs.
const StatusFD = 3

// ABI returns the kernel's Landlock ABI version, 0 when Landlock is unavailable
// (kernel without it, disabled at boot, or the syscall refused by seccomp).
func ABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// Args returns the arguments (after the launcher's own name) that run bin with argv
// under p. exclude is the workspace directory: programs resolving into it are never
// granted. The launcher reports a failure to StatusFD when withStatus.
func Args(p *agent.ExecPolicy, exclude, bin string, argv []string, withStatus bool) []string {
	args := []string{Command}
	for _, name := range p.Programs {
		args = append(args, "-p", name)
	}
	for _, d := range p.Dirs {
		args = append(args, "-d", d)
	}
	if exclude != "" {
		args = append(args, "-x", exclude)
	}
	if withStatus {
		args = append(args, "-status-fd", strconv.Itoa(StatusFD))
	}
	return append(append(args, "--", bin), argv...)
}

// Main is `cws-agent launch [-p NAME]… [-d DIR]… [-x DIR] [-status-fd N] -- FILE ARGV0 ARGS…`:
// it restricts the process to executing the programs NAME (looked up on agent.SafePath)
// and the trees DIR, then execs FILE with ARGV0 ARGS… and the current environment.
// It returns only on failure, after writing the error to the status fd if one is given.
func Main(args []string) error {
	var progs, dirs list
	fs := flag.NewFlagSet(Command, flag.ContinueOnError)
	fs.Var(&progs, "p", "a program name allowed to execute (repeatable)")
	fs.Var(&dirs, "d", "a tree whose files may execute (repeatable)")
	exclude := fs.String("x", "", "never grant files beneath this directory (the workspace)")
	statusFD := fs.Int("status-fd", -1, "report a failure on this file descriptor")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var status *os.File
	if *statusFD >= 0 {
		syscall.CloseOnExec(*statusFD)
		status = os.NewFile(uintptr(*statusFD), "status")
	}
	err := run(progs, dirs, *exclude, fs.Args())
	if status != nil {
		fmt.Fprint(status, err)
	}
	return err
}

func run(progs, dirs []string, exclude string, rest []string) error {
	if len(rest) < 2 {
		return errors.New("usage: launch [-p NAME]… [-d DIR]… -- FILE ARGV0 [ARGS…]")
	}
	if err := Restrict(Grants(progs, agent.SafePath, exclude), dirs); err != nil {
		return err
	}
	if err := syscall.Exec(rest[0], rest[1:], os.Environ()); err != nil {
		return fmt.Errorf("exec %s: %w", rest[1], err)
	}
	return nil // not reached
}

// Restrict restricts the calling process (all its threads) and its future children to
// executing files and the files beneath dirs (missing dirs are skipped). It sets
// no_new_privs. It fails where Landlock is unavailable.
func Restrict(files, dirs []string) error {
	abi := ABI()
	if abi == 0 {
		return errors.New("landlock is unavailable")
	}
	exec := landlock.AccessFSSet(ll.AccessFSExecute)
	handled := exec
	var rules []landlock.Rule
	if abi >= 2 {
		refer := landlock.AccessFSSet(ll.AccessFSRefer)
		handled |= refer
		rules = append(rules, landlock.PathAccess(refer, "/"))
	} // ABI 1 cannot grant REFER: files can't move between directories there.
	var trees []string
	for _, d := range dirs {
		if real, err := filepath.EvalSymlinks(d); err == nil && filepath.IsAbs(real) {
			trees = append(trees, real)
		}
	}
	if len(files)+len(trees) > 0 {
		rules = append(rules, landlock.PathAccess(exec, append(files, trees...)...))
	}
	cfg, err := landlock.NewConfig(handled)
	if err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	if err := cfg.Restrict(rules...); err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	return nil
}

// list is a repeatable string flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }
