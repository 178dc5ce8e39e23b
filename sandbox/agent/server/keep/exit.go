package keep

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// exitsDir holds one marker file per adopted process, named by its pid: empty until
// its reaper writes the wait status into it.
const exitsDir = "exits"

// drain reads one output pipe into its ring until the pipe ends.
func (k *Keeper) drain(p *proc, f *os.File, r *Ring) {
	defer f.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			p.mu.Lock()
			r.Write(buf[:n])
			p.notify()
			p.mu.Unlock()
		}
		if err != nil {
			break
		}
	}
	k.update(p, func() { p.open-- })
}

// exited sets the exit code once; the first reaper to tell wins. The process's exit
// marker has served then.
func (k *Keeper) exited(p *proc, code int) {
	k.unmark(p.pid)
	k.update(p, func() {
		if p.code == nil {
			p.code = &code
		}
	})
}

// update changes p under its lock with fn, and ends it once its exit code is known and
// its output read to the end, as a process ended before: nothing it wrote is missing
// from a process that no longer runs. An end is on record before anyone sees it.
func (k *Keeper) update(p *proc, fn func()) {
	p.mu.Lock()
	fn()
	if p.ending || p.ended != nil || p.code == nil || p.open > 0 || p.lost {
		p.notify()
		p.mu.Unlock()
		return
	}
	p.ending = true
	now := time.Now().UTC()
	rec := p.infoLocked()
	rec.Running, rec.ExitCode, rec.EndedAt = false, p.code, &now
	p.mu.Unlock()
	k.save(rec)
	p.mu.Lock()
	p.ended = &now
	p.notify()
	p.mu.Unlock()
}

// RecordExit writes the wait status of pid, just reaped, into its marker in dir, when
// the keeper made one: init calls it for every process it reaps, and only background
// processes whose serve died before them have a marker. Anything else is left alone.
func RecordExit(dir string, pid int, status syscall.WaitStatus) {
	f, err := os.OpenFile(markerPath(dir, pid), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return
	}
	_, _ = f.WriteString(strconv.FormatUint(uint64(status), 10))
	f.Close()
}

func markerPath(dir string, pid int) string {
	return filepath.Join(dir, exitsDir, strconv.Itoa(pid))
}

// mark makes pid's empty marker.
func (k *Keeper) mark(pid int) {
	if k.dir == "" {
		return
	}
	if err := os.WriteFile(markerPath(k.dir, pid), nil, 0o600); err != nil {
		k.log.Warn("exit marker not made: the exit code of this process is lost if the agent dies before it", "pid", pid, "err", err)
	}
}

// unmark removes pid's marker, if there is one.
func (k *Keeper) unmark(pid int) {
	if k.dir != "" {
		_ = os.Remove(markerPath(k.dir, pid))
	}
}

// readExit reads the exit code from pid's marker, if its reaper wrote one.
func (k *Keeper) readExit(pid int) (int, bool) {
	if k.dir == "" {
		return 0, false
	}
	b, err := os.ReadFile(markerPath(k.dir, pid))
	if err != nil || len(b) == 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return 0, false
	}
	return exitCode(syscall.WaitStatus(n)), true
}

// exitCode is what exec's ProcessState.ExitCode says: the code, or -1 for a signal.
func exitCode(ws syscall.WaitStatus) int {
	if ws.Exited() {
		return ws.ExitStatus()
	}
	return -1
}

// watch waits for p's process to exit (its pidfd turns readable), then for its
// reaper's word: serve's Exited, or the status init wrote into the marker. Without
// either within exitWait, the code is -1. Without a pidfd it polls for the marker
// until either comes.
func (k *Keeper) watch(p *proc, pidfd *os.File) {
	known := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.code != nil
	}
	poll, deadline := exitPoll, time.Time{}
	if pidfd == nil {
		if k.dir == "" {
			return // in memory: serve outlives the process, and tells
		}
		poll = noPIDFDPoll
	} else {
		err := waitExit(pidfd)
		pidfd.Close()
		if err != nil {
			k.log.Warn("background process: cannot watch its exit", "id", p.id, "pid", p.pid, "err", err)
			return // Exited still ends it
		}
		deadline = time.Now().Add(exitWait)
	}
	for !known() {
		if code, ok := k.readExit(p.pid); ok {
			k.exited(p, code)
			return
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			k.log.Warn("background process exited, and no reaper reported its status", "id", p.id, "pid", p.pid)
			k.exited(p, -1)
			return
		}
		time.Sleep(poll)
	}
}

// waitExit returns once the process of pidfd has exited. The pidfd is waited for in
// the runtime's poller when it is non-blocking, so a waiting process costs no thread.
func waitExit(pidfd *os.File) error {
	rc, err := pidfd.SyscallConn()
	if err != nil {
		return err
	}
	poll := func(fd uintptr, timeout int) bool {
		for {
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, timeout)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return n > 0 || err != nil
		}
	}
	err = rc.Read(func(fd uintptr) bool { return poll(fd, 0) })
	if err == nil {
		return nil
	}
	// Not in the poller (a blocking pidfd): wait on a thread of its own.
	return rc.Control(func(fd uintptr) { poll(fd, -1) })
}
