package main

import (
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cwsdev/cws/sandbox/agent"
)

// agentStateDir is the agent's private state: it survives `serve` being restarted.
// In root mode it is on the container's /tmp, and only the agent uid may enter it; in
// same-uid mode (useRunDirState) it is in the socket directory, which every tool
// process is fenced off from writing (server.Config.Fenced). Set once, at start.
var agentStateDir = "/tmp/.cws-agent"

// useRunDirState moves the agent's state into its socket directory: same-uid mode,
// where no file mode keeps the tools out of /tmp/.cws-agent, but their Landlock
// fence keeps them from writing anywhere beneath agent.RunDir. Without a socket
// directory the state stays on /tmp, and false says so.
func useRunDirState() bool {
	if fi, err := os.Stat(agent.RunDir); err != nil || !fi.IsDir() {
		return false
	}
	agentStateDir = filepath.Join(agent.RunDir, "state")
	return true
}

// procDir is where the process keeper holds the background processes (package keep):
// the agent's private state, where they outlive serve.
func procDir() string { return filepath.Join(agentStateDir, "procs") }

// requestsDir keeps the outcomes of recent requests, so that they survive serve being
// killed and restarted by init (server.Config.StateDir).
func requestsDir() string { return filepath.Join(agentStateDir, "requests") }

// agentCaps are the capabilities the agent keeps, and the only ones: SETUID and SETGID
// to act as the tool user (its fs identity for workspace files, its credentials for
// every process started), KILL to signal the tool user's processes (package ident).
var agentCaps = []uintptr{unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_KILL}

// Same-uid mode.
//
// Root mode (Docker) is described at runInit: init starts as root, and the agent's own
// uid keeps every tool process away from it. A Kubernetes pod gives the agent none of
// that: its container starts as the tool user itself (runAsUser 1000, runAsNonRoot,
// every capability dropped, no_new_privs, a read-only root with emptyDirs at /tmp,
// /.cws and /.cws-run). init tells the two apart by its uid: not root is same-uid mode,
// where:
//
//   - nothing is chowned and nothing dropped: init, serve, the keeper and every tool
//     process run as init's own uid:gid (CWS_UID_GID is set to it for serve), and
//     package ident takes no tool identity (no Credential, no setfsuid);
//   - the secret of the socket path comes from /.cws-run/secret (written by the pod's
//     init container) and the file is removed at once, before any tool process exists;
//     it reaches serve through a pipe, never an environment (handoff.go);
//   - init binds the abstract socket @cws-agent and the TCP listener (agent.EnvListen,
//     behind the secret handshake: how cws reaches a pod) itself, once, and hands both
//     to every serve it starts: no tool process can take them while serve restarts;
//   - serve restarts when it dies, and starts the keeper, as in root mode; the keeper
//     and serve prove a key of init's to each other on every connection (keep.SetKey),
//     since its socket is in a directory the tools can reach.
//
// What keeps the tools out of the agent's reach, instead of a uid:
//
//   - every agent process (init, serve, keep, attach, revive) is not dumpable
//     (dumpable.go): its /proc entries belong to root, and reading its environment,
//     memory or descriptors, or tracing it, needs CAP_SYS_PTRACE, which nothing in the
//     pod has;
//   - every process serve starts for the tools (commands, terminals, background
//     processes, language servers, the git and rg the tools run) starts in a Landlock
//     domain of its own scoped for signals and abstract unix sockets (Landlock ABI 6:
//     server.Config.SameUID, launch.Ruleset.StartVia): it can't signal any agent
//     process, trace it, or connect to @cws-agent. The launcher (`cws-agent launch`)
//     restricts itself and execs the command, so that no thread of serve is ever in
//     that domain (a throwaway thread of serve's would be, for long enough to be
//     stopped or killed: launch/scope.go). That costs a start of the launcher per
//     command. Without Landlock scopes serve says so in its log and in ping
//     (agent.PingResult.Scoped) and goes on, reachable.
//
// The agent's files, which root mode keeps by owner and mode, same-uid mode keeps with
// the same domains: each also handles every Landlock right that changes the file
// system and grants it everywhere but beneath the agent's own directories (its
// binary's, /.cws, and its socket directory, /.cws-run: launch.Fence,
// server.Config.Fenced). The agent's state moves from /tmp into /.cws-run/state
// (useRunDirState), so the socket, the keeper's records and socket and the request
// outcomes are all beyond a tool's reach to write: a restarted serve reads back only
// what an agent process wrote. A tool may still read them, and connect to the sockets
// (the secret handshake and the keeper's key decide who is served).
//
// What same-uid mode can't do that root mode does: processes of different calls are
// in different domains, so one command can't signal another call's background process
// (killProcess can); and a `kubectl exec` as the pod's user runs in no domain, so it
// can signal the agent or write its directories as any operator could.

// runInit is the container's PID 1. It starts as root (with only CHOWN, SETUID, SETGID
// and KILL) and, while it is root, hands /workspace to the tool uid and the agent's own
// directories (/.cws-run, its state on /tmp) to the agent uid. It then drops to the
// agent uid for good, keeping SETUID, SETGID and KILL, starts `serve` with them,
// forwards termination signals to it, restarts it if it dies, and reaps every zombie.
//
// The agent uid is not the tool uid: nothing the workspace runs can signal, trace or
// read the agent. A container made without CWS_AGENT_UID_GID (an older cws) runs the
// agent as the tool uid, as before. Started without root, init runs in same-uid mode
// (above).
func runInit(args []string) error {
	if err := applyRlimits(); err != nil {
		return err
	}
	uid, gid, err := parseUIDGID(os.Getenv("CWS_UID_GID"))
	if err != nil {
		return fmt.Errorf("CWS_UID_GID: %w", err)
	}
	ws := os.Getenv("CWS_WORKSPACE")
	if ws == "" {
		ws = "/workspace"
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", "cws-agent init")
	var h handoff // what every serve started gets (handoff.go)
	separate := false
	if os.Getuid() != 0 {
		// Same-uid mode: see the top of this file.
		if err := sameUIDInit(log, &h); err != nil {
			return err
		}
	} else {
		if err := handOver(ws, uid, gid); err != nil {
			return err
		}
		au, ag := uid, gid
		if s := os.Getenv(agent.EnvAgentUser); s != "" {
			if au, ag, err = parseUIDGID(s); err != nil {
				return fmt.Errorf("%s: %w", agent.EnvAgentUser, err)
			}
			if au == uid || ag == gid {
				return fmt.Errorf("%s=%q: the agent's uid and gid must differ from the tool's (%d:%d)", agent.EnvAgentUser, s, uid, gid)
			}
			separate = true
		}
		if secret, err := takeSecret(au, ag); err != nil {
			return err
		} else if secret != "" {
			os.Setenv(agent.EnvSecret, secret) // for serve: only the agent uid reads its environment
		}
		if err := prepareAgentDirs(au, ag); err != nil {
			return err
		}
		if separate {
			err = dropToAgent(au, ag)
		} else {
			err = dropTo(uid, gid)
		}
		if err != nil {
			return err
		}
	}
	secret := h.secrets.Secret
	if !h.sameUID {
		secret = os.Getenv(agent.EnvSecret)
	}
	h.tcp = listenTCP(log, secret)
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
		done, err := h.prepare(cmd)
		if err == nil {
			err = cmd.Start()
			done()
		}
		if err != nil {
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
			recordExit(pid, st) // keep.go
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

// prepareAgentDirs gives the agent uid its state directory and the socket directory
// the host mounted (when there is one), each 0700/0711 and owned by the agent, so
// that the tool uid can neither read the agent's state nor replace its socket. Both
// are made before any tool process exists.
func prepareAgentDirs(uid, gid int) error {
	if err := os.MkdirAll(agentStateDir, 0o700); err != nil {
		return fmt.Errorf("agent state %s: %w", agentStateDir, err)
	}
	if err := own(agentStateDir, uid, gid, 0o700); err != nil {
		return err
	}
	if fi, err := os.Lstat(agent.RunDir); err == nil && fi.IsDir() {
		// The host's directory: anyone may traverse it to the socket (the secret
		// handshake decides who is served), only the agent may change it.
		if err := own(agent.RunDir, uid, gid, 0o711); err != nil {
			return err
		}
	}
	return nil
}

// takeSecret reads the socket's secret that the host left in the socket directory
// (agent.SecretFile), as root, and leaves the file to the agent uid alone (0400), for
// the next start of the container. Root holds CHOWN but not DAC_OVERRIDE, so it takes
// the file first when the host's cws is not root. No secret file: the exec path only,
// or a container made by an older cws (its secret is in the environment).
func takeSecret(uid, gid int) (string, error) {
	p := filepath.Join(agent.RunDir, agent.SecretFile)
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return "", nil
	}
	if err := os.Lchown(p, 0, 0); err != nil {
		return "", fmt.Errorf("agent secret: %w", err)
	}
	if err := os.Chmod(p, 0o400); err != nil {
		return "", fmt.Errorf("agent secret: %w", err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("agent secret: %w", err)
	}
	if err := os.Lchown(p, uid, gid); err != nil {
		return "", fmt.Errorf("agent secret: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// own sets a directory's owner and mode, refusing anything but a directory.
func own(dir string, uid, gid int, mode os.FileMode) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == gid && fi.Mode().Perm()&0o022 == 0 {
		return nil // the host made it so already
	}
	// Root holds CHOWN but not FOWNER, so it may chmod only what it owns: it takes the
	// directory first (the host's may belong to an unprivileged cws), sets the mode,
	// then hands it to the agent.
	if err := os.Lchown(dir, 0, 0); err != nil {
		return fmt.Errorf("chown %s: %w", dir, err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		return fmt.Errorf("chmod %s: %w", dir, err)
	}
	if err := os.Lchown(dir, uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", dir, err)
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

// dropToAgent leaves root for the agent uid, keeping agentCaps and nothing else:
//
//   - PR_SET_KEEPCAPS keeps the permitted set across the setuid (which would clear it);
//   - capset then leaves agentCaps permitted, effective and inheritable, all else gone;
//   - each is raised in the ambient set, the only way a capability crosses the exec of
//     `serve` (no file capabilities, and no-new-privileges). serve clears its
//     inheritable and ambient sets first thing (clearInheritable), so no process it
//     starts receives any.
//
// Every thread of the process is changed (Go's Setuid and friends already do that;
// capset and prctl go through AllThreadsSyscall), so whichever thread forks serve has
// the same credentials.
func dropToAgent(uid, gid int) error {
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_SET_KEEPCAPS, 1, 0); e != 0 {
		return fmt.Errorf("keep capabilities: %w", e)
	}
	if err := dropTo(uid, gid); err != nil {
		return err
	}
	var mask uint32
	for _, c := range agentCaps {
		mask |= 1 << c
	}
	if err := setCaps(mask, mask); err != nil {
		return err
	}
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_SET_KEEPCAPS, 0, 0); e != 0 {
		return fmt.Errorf("keep capabilities off: %w", e)
	}
	for _, c := range agentCaps {
		if _, _, e := syscall.AllThreadsSyscall6(syscall.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, c, 0, 0, 0); e != 0 {
			return fmt.Errorf("ambient capability %d: %w", c, e)
		}
	}
	return nil
}

// capHeader and capData are the kernel's capability structs (version 3, two words);
// package level so that their addresses stay valid while every thread makes the call.
var (
	capHeader = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	capData   [2]unix.CapUserData
)

// setCaps sets the permitted and effective sets to keep (all in the low word) and the
// inheritable set to inherit, on every thread. Lowering the inheritable set also
// clears the ambient set.
func setCaps(keep, inherit uint32) error {
	capData = [2]unix.CapUserData{{Effective: keep, Permitted: keep, Inheritable: inherit}}
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_CAPSET, uintptr(unsafePointer(&capHeader)), uintptr(unsafePointer(&capData[0])), 0); e != 0 {
		return fmt.Errorf("capset: %w", e)
	}
	return nil
}

// clearInheritable keeps the process's permitted and effective capabilities and
// empties its inheritable and ambient sets on every thread, so that nothing it starts
// can receive a capability. It is the first thing serve does.
func clearInheritable() error {
	var d [2]unix.CapUserData
	h := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	if err := unix.Capget(&h, &d[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if d[0].Inheritable == 0 && d[1].Inheritable == 0 {
		return nil
	}
	return setCaps(d[0].Permitted, 0)
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
		return 0, 0, fmt.Errorf("uid:gid %q: want a non-root uid:gid such as 1000:1000", s)
	}
	return uid, gid, nil
}
