package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/cwsdev/cws/sandbox/agent/server/keep"
)

// agentProcess reports whether the subcommand is one of the agent's own processes
// (init, serve, the keeper, the attach bridge, revive, install), as opposed to launch,
// which is about to become a tool process, and version.
func agentProcess(sub string) bool {
	switch sub {
	case "init", "serve", "attach", "revive", "install", keep.Command:
		return true
	}
	return false
}

// setNonDumpable clears the process's dumpable flag (PR_SET_DUMPABLE 0). Its /proc
// entries then belong to root, and reading its environment, memory or descriptors,
// or tracing it, needs CAP_SYS_PTRACE, which no process in a cws sandbox has: a
// process of the same uid (same-uid mode, where the agent is the tool user; or a
// `docker exec`/`kubectl exec` as that uid) is refused as any other. The kernel sets
// the flag again on every execve, so each agent process clears it itself, first thing.
// In root mode the agent's own uid already keeps the tools out; the flag is harmless
// there, and kept for depth.
func setNonDumpable() {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "cws-agent: prctl(PR_SET_DUMPABLE, 0): %v\n", err)
	}
}

// dumpable reports the process's dumpable flag (for tests).
func dumpable() int {
	v, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	return v
}
