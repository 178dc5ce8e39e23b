package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// reviveWait is how long revive waits for init to start a new serve.
const reviveWait = 10 * time.Second

// runRevive brings back an agent that stopped answering; cws runs it through docker
// exec when the agent's pings go unanswered. It continues init (PID 1) and every
// `cws-agent serve` that runs as init's uid, in case they were stopped (SIGSTOP), kills
// those serves, and waits until init has started a new one. The `cws-agent attach`
// bridges of init's uid are killed too: their streams end with the old serve, and a
// stopped one would never notice. Nothing else is touched: the workspace, its
// processes and the container stay.
//
// It signals as init's own uid, which needs no capability: run as root, it first
// switches to that uid (CAP_SETUID), unless it can signal as root (CAP_KILL).
func runRevive(args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("revive takes no arguments")
	}
	uid, gid, err := procIDs(1)
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if os.Geteuid() != uid && !canSignal(1) {
		if err := becomeIDs(uid, gid); err != nil {
			return fmt.Errorf("act as the agent's uid %d: %w", uid, err)
		}
	}
	_ = syscall.Kill(1, syscall.SIGCONT) // a stopped init would never start a new serve
	old := agentProcs(uid, "serve")
	bridges := agentProcs(uid, "attach")
	for _, pid := range old {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	var errs []error
	for _, pid := range append(old, bridges...) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for deadline := time.Now().Add(reviveWait); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, pid := range agentProcs(uid, "serve") {
			if !slices.Contains(old, pid) {
				fmt.Printf("serve restarted: pid %d (was %v)\n", pid, old)
				return nil
			}
		}
	}
	return fmt.Errorf("init started no new serve within %s (killed %v)", reviveWait, old)
}

// agentProcs lists the processes that run `cws-agent <sub>` as uid, revive's own
// excepted.
func agentProcs(uid int, sub string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 || pid == os.Getpid() {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
		if len(argv) != 2 || filepath.Base(argv[0]) != "cws-agent" || argv[1] != sub {
			continue
		}
		if u, _, err := procIDs(pid); err == nil && u == uid {
			out = append(out, pid)
		}
	}
	return out
}

// procIDs reads a process's real uid and gid from /proc.
func procIDs(pid int) (uid, gid int, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, 0, err
	}
	uid, gid = -1, -1
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "Uid:":
			uid, _ = strconv.Atoi(f[1])
		case "Gid:":
			gid, _ = strconv.Atoi(f[1])
		}
	}
	if uid < 0 || gid < 0 {
		return 0, 0, fmt.Errorf("no Uid or Gid in /proc/%d/status", pid)
	}
	return uid, gid, nil
}

// canSignal reports whether this process may signal pid (signal 0 checks only that).
func canSignal(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

// becomeIDs switches every thread to uid:gid for good.
func becomeIDs(uid, gid int) error {
	if err := syscall.Setgroups([]int{gid}); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("setgid %d: %w", gid, err)
	}
	return syscall.Setuid(uid)
}
