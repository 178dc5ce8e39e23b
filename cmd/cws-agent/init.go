package main

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runInit is the container's PID 1. As root (with only CHOWN, SETUID and SETGID) it
// hands /workspace to the tool uid, then drops to that uid for good, starts `serve`,
// forwards termination signals to it, restarts it if it dies, and reaps every zombie.
func runInit(args []string) error {
	uid, gid, err := parseUIDGID(os.Getenv("CWS_UID_GID"))
	if err != nil {
		return err
	}
	ws := os.Getenv("CWS_WORKSPACE")
	if ws == "" {
		ws = "/workspace"
	}
	if os.Getuid() == 0 {
		if err := handOver(ws, uid, gid); err != nil {
			return err
		}
		if err := dropTo(uid, gid); err != nil {
			return err
		}
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	self, err := os.Executable()
	if err != nil {
		self = "/.cws/cws-agent"
	}
	var child *os.Process
	start := func() {
		cmd := exec.Command(self, "serve")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.Env = os.Environ()
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "cws-agent init: start serve: %v\n", err)
			return
		}
		child = cmd.Process
	}
	start()
	stopping := false
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			stopping = true
			if child != nil {
				_ = child.Signal(sig)
			}
			continue
		}
		for {
			var st syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &st, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
			if child != nil && pid == child.Pid {
				child = nil
				if stopping {
					return nil
				}
				fmt.Fprintf(os.Stderr, "cws-agent init: serve exited (%v), restarting\n", st)
				time.Sleep(100 * time.Millisecond)
				start()
			}
		}
	}
	return nil
}

// handOver gives the workspace to the tool uid. A fresh volume is owned by root; a
// volume Docker seeded from the image keeps the image's owners, so the whole tree is
// handed over the first time.
func handOver(ws string, uid, gid int) error {
	fi, err := os.Stat(ws)
	if err != nil {
		return fmt.Errorf("workspace %s: %w", ws, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == gid {
		return nil
	}
	return filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		_ = os.Lchown(p, uid, gid)
		return nil
	})
}

// dropTo leaves root for good: after setuid to a non-zero uid the kernel clears every
// capability, and no-new-privileges keeps them from coming back.
func dropTo(uid, gid int) error {
	if err := syscall.Setgroups([]int{gid}); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("setgid %d: %w", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("setuid %d: %w", uid, err)
	}
	return nil
}

func parseUIDGID(s string) (int, int, error) {
	if s == "" {
		s = "1000:1000"
	}
	u, g, ok := strings.Cut(s, ":")
	if !ok {
		g = u
	}
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if err1 != nil || err2 != nil || uid <= 0 || gid <= 0 {
		return 0, 0, fmt.Errorf("CWS_UID_GID=%q: want a non-root uid:gid such as 1000:1000", s)
	}
	return uid, gid, nil
}
