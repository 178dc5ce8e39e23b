package launch

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"syscall"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Ruleset is a Landlock ruleset that lets only some files, and the files beneath some
// directories, be executed. Building it costs a path lookup per rule; enforcing it
// costs two system calls, and it may be enforced any number of times.
type Ruleset struct {
	fd int // the ruleset's descriptor, close-on-exec
}

// NewRuleset builds the ruleset that handles execution (and, from ABI 2, moving files
// between directories, granted everywhere: a ruleset that handles REFER denies it
// unless granted) and grants execution of files and of everything beneath dirs, their
// symlinks resolved. Missing dirs are skipped; a missing file is an error. It fails
// where Landlock is unavailable.
func NewRuleset(files, dirs []string) (*Ruleset, error) {
	return NewScopedRuleset(files, dirs, 0, nil)
}

// NewScopedRuleset is NewRuleset whose domain is also scoped (Scopes): a process it
// restricts can't signal, nor connect to an abstract unix socket of, any process
// outside its domain. scoped 0 is NewRuleset; other scopes need ABI ≥ ScopeABI. With a
// fence, the process can't write beneath the fenced directories either (Fence).
func NewScopedRuleset(files, dirs []string, scoped uint64, fence *Fence) (*Ruleset, error) {
	abi := ABI()
	if abi == 0 {
		return nil, errors.New("landlock is unavailable")
	}
	if scoped != 0 && abi < ScopeABI {
		return nil, fmt.Errorf("landlock ABI %d can't scope a domain (ABI %d can)", abi, ScopeABI)
	}
	r, err := newRuleset(abi, ll.AccessFSExecute, scoped, fence)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if err := r.allow(f, ll.AccessFSExecute); err != nil {
			r.Close()
			return nil, err
		}
	}
	for _, d := range dirs {
		real, err := filepath.EvalSymlinks(d)
		if err != nil || !filepath.IsAbs(real) {
			continue
		}
		if err := r.allow(real, ll.AccessFSExecute); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

// newRuleset creates a ruleset at ABI abi that handles the rights handled (and REFER
// from ABI 2, granted on "/": a ruleset that handles REFER denies moving files between
// directories unless it grants it; ABI 1 cannot grant it, so files can't move between
// directories there), scopes its domain with scoped, and with a fence handles the
// write rights and grants them beside the fenced directories.
func newRuleset(abi int, handled, scoped uint64, fence *Fence) (*Ruleset, error) {
	if abi >= 2 {
		handled |= ll.AccessFSRefer
	}
	if fence != nil {
		handled |= writeRights(abi)
	}
	fd, err := ll.LandlockCreateRuleset(&ll.RulesetAttr{HandledAccessFS: handled, Scoped: scoped}, 0)
	if err != nil {
		return nil, fmt.Errorf("landlock: create ruleset: %w", err)
	}
	r := &Ruleset{fd: fd}
	if abi >= 2 {
		if err := r.allow("/", ll.AccessFSRefer); err != nil {
			r.Close()
			return nil, err
		}
	}
	if fence != nil {
		if err := fence.apply(r, abi); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

// allow grants access to path (a file, or a directory and everything beneath it).
func (r *Ruleset) allow(path string, access uint64) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("landlock: %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := ll.LandlockAddPathBeneathRule(r.fd, &ll.PathBeneathAttr{ParentFd: fd, AllowedAccess: access}, 0); err != nil {
		return fmt.Errorf("landlock: add rule for %s: %w", path, err)
	}
	return nil
}

// Close releases the ruleset. Threads it restricted stay restricted.
func (r *Ruleset) Close() error { return unix.Close(r.fd) }

// enforce restricts the calling thread, and every process it starts from now on, to
// the ruleset, for good. It sets the thread's no_new_privs, which Landlock requires of
// an unprivileged caller. Other threads of the process are not restricted.
func (r *Ruleset) enforce() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("landlock: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if err := ll.LandlockRestrictSelf(r.fd, 0); err != nil {
		return fmt.Errorf("landlock: restrict: %w", err)
	}
	return nil
}

// Start calls start, which starts a process (exec.Cmd.Start), on an OS thread of its
// own that the ruleset restricts first, and returns start's error. The process inherits
// the restriction from the thread that forked it, with no second exec in front of it;
// the rest of this process stays unrestricted.
//
// The thread is never used again: the goroutine that ran start ends still locked to it
// (runtime.LockOSThread), and the Go runtime then ends the thread instead of returning it
// to its pool. While locked, the runtime creates new threads from its template thread,
// never from this one. The process is this process's child all the same (it passes to
// another thread when this one ends), so Wait, a pidfd and signals work as for any
// other.
//
// The kernel sends a parent-death signal (SysProcAttr.Pdeathsig) when the thread that
// forked the process ends, not the process: start must not ask for one, since this
// thread ends at once; and whatever else in the process starts a child with one must
// fork it from a thread it keeps locked until the child ends (lsp's startHeld), or
// the thread it happened to run on may be this one, ended here.
func (r *Ruleset) Start(start func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // for good: see above
		if err := r.enforce(); err != nil {
			errc <- err
			return
		}
		errc <- start()
	}()
	return <-errc
}

// Exec restricts the calling process's current thread and execs file with argv and env
// in its place: the program runs restricted. It returns only on failure.
func (r *Ruleset) Exec(file string, argv, env []string) error {
	runtime.LockOSThread() // the exec must come from the restricted thread
	if err := r.enforce(); err != nil {
		return err
	}
	if err := syscall.Exec(file, argv, env); err != nil {
		return fmt.Errorf("exec %s: %w", argv[0], err)
	}
	return nil // not reached
}
