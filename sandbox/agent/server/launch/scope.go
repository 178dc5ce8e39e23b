package launch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Scoping: from ABI 6 a Landlock domain can be scoped. A process in a domain scoped
// for signals can't signal (kill, tgkill, fcntl F_SETOWN…) any process outside its
// domain, and one scoped for abstract unix sockets can't connect or send to an
// abstract socket made outside its domain; processes in the same domain, or in a
// domain nested in it, stay reachable. Besides, whatever its scopes, a process in a
// Landlock domain can't ptrace a process outside it, nor open what needs ptrace
// access (/proc/<pid>/environ, mem). Listing /proc/<pid>/fd is judged by ownership
// alone: the agent's processes are not dumpable (cmd/cws-agent), which gives their
// /proc entries to root.
//
// The agent starts tool processes inside such a domain when it shares their uid
// (server.Config.SameUID): the uid then no longer keeps them from the agent, the
// domain does.
//
// Such a domain must hold nothing of the agent's, and a domain holds whatever was
// forked from a restricted thread *and that thread*: Landlock domains are per thread,
// and a signal (kill of a thread id, tgkill) or a ptrace is judged against the target
// thread's domain. Ruleset.Start's throwaway thread lives on for a moment after the
// command it forked has exec'd, in the command's domain: long enough for the command
// to SIGSTOP or SIGKILL it, which stops or kills the whole agent (measured: a plain
// `sh -c 'kill -0 <each thread of $PPID>'` reached it in about half the starts). That
// is harmless when the uids differ (the agent's own uid keeps the tools out whatever
// the domains), not when they are the same. So a scoped command starts through the
// launcher instead (Ruleset.StartVia): the agent starts `cws-agent launch` unrestricted,
// which restricts itself with the ruleset it is handed and execs the command, the
// only process of its domain. It costs the launcher's start (a Go program's) per
// command.

// ScopeABI is the first Landlock ABI that scopes domains.
const ScopeABI = 6

// ScopeAll is every scope the agent asks for: signals and abstract unix sockets.
const ScopeAll = uint64(ll.ScopeSignal | ll.ScopeAbstractUnixSocket)

// Scopes returns ScopeAll where the kernel scopes domains, 0 where it can't (no
// Landlock, or an ABI before ScopeABI).
func Scopes() uint64 {
	if ABI() >= ScopeABI {
		return ScopeAll
	}
	return 0
}

// NewScopeRuleset builds a ruleset that restricts no execution and only scopes the
// domain (NewScopedRuleset), and with a fence keeps writes out of the fenced
// directories: what a tool process with no exec policy runs under.
func NewScopeRuleset(scoped uint64, fence *Fence) (*Ruleset, error) {
	if scoped == 0 {
		return nil, errors.New("landlock: no scope to restrict to")
	}
	abi := ABI()
	if abi < ScopeABI {
		return nil, fmt.Errorf("landlock ABI %d can't scope a domain (ABI %d can)", abi, ScopeABI)
	}
	if fence == nil {
		fd, err := ll.LandlockCreateRuleset(&ll.RulesetAttr{Scoped: scoped}, 0)
		if err != nil {
			return nil, fmt.Errorf("landlock: create scoped ruleset: %w", err)
		}
		return &Ruleset{fd: fd}, nil
	}
	return newRuleset(abi, 0, scoped, fence)
}

// StartVia starts cmd (an exec.Cmd not started yet) through launcher, the agent's
// binary: the process starts as `launcher launch -ruleset-fd N -status-fd M -- FILE
// ARGV…`, restricts itself with a duplicate of r (handed over as N), and execs cmd's
// program with cmd's arguments, environment, directory and attributes in its place.
// Nothing but the command (and what it starts) is ever in that domain. It returns
// once the program runs, or the launcher's refusal ("exec sh: permission denied"),
// after reaping it, as the start's error. cmd's Path, Args and ExtraFiles are as they
// were when it returns.
func (r *Ruleset) StartVia(launcher string, cmd *exec.Cmd) error {
	fd, err := unix.FcntlInt(uintptr(r.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("landlock: ruleset: %w", err)
	}
	rs := os.NewFile(uintptr(fd), "landlock-ruleset")
	defer rs.Close()
	status, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer status.Close()
	path, args, extra := cmd.Path, cmd.Args, cmd.ExtraFiles
	n := 3 + len(extra)
	cmd.ExtraFiles = append(extra[:len(extra):len(extra)], rs, w)
	cmd.Path = launcher
	cmd.Args = append([]string{filepath.Base(launcher), Command, "-ruleset-fd", strconv.Itoa(n), "-status-fd", strconv.Itoa(n + 1), "--", path}, args...)
	err = cmd.Start()
	w.Close()
	cmd.Path, cmd.Args, cmd.ExtraFiles = path, args, extra
	if err != nil {
		return err
	}
	msg, _ := io.ReadAll(io.LimitReader(status, 4096)) // EOF once the program runs
	if len(msg) == 0 {
		return nil
	}
	_ = cmd.Wait() // the launcher, exiting 126
	return errors.New(strings.TrimSpace(string(msg)))
}

// StartVia is Ruleset.StartVia under the ruleset of the policy (Start).
func (c *Cache) StartVia(launcher string, programs, dirs []string, exclude string, cmd *exec.Cmd) error {
	rs, err := c.ruleset(programs, dirs, exclude)
	if err != nil {
		return err
	}
	defer rs.Close()
	return rs.StartVia(launcher, cmd)
}
