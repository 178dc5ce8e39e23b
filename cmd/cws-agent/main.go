// Command cws-agent is the static agent cws injects into every sandbox at /.cws.
//
//	cws-agent init     PID 1: prepares /workspace, drops to the tool uid, runs `serve`, reaps zombies
//	cws-agent serve    serves the agent protocol on the abstract socket @cws-agent, and on
//	                   /.cws-run/agent.sock (proven by CWS_AGENT_SECRET) when cws mounted it
//	cws-agent attach   bridges stdio to that socket (what cws runs with `docker exec`)
//	cws-agent install  copies itself (and the socket secret) where a pod's workspace container finds it
//	cws-agent revive   continues a stopped agent and restarts serve (cws runs it when the agent stops answering)
//	cws-agent launch   restricts itself with Landlock, then execs a command (package launch)
//	cws-agent keep     keeps serve's background processes and their output, outliving serve
//	                   (package keep; serve starts it)
//	cws-agent version  prints the agent's release and protocol
//
// It imports only sandbox/agent/..., their few dependencies and the standard library, and
// is built static, so it runs in any image.
package main

import (
	"fmt"
	"os"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/keep"
	"github.com/cwsdev/cws/sandbox/agent/server/launch"
	"github.com/cwsdev/cws/version"
)

// socketName is the abstract unix socket the agent listens on. Abstract sockets live in
// the container's network namespace, need no writable path, and can't be deleted.
const socketName = "@cws-agent"

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	if agentProcess(os.Args[1]) {
		// First thing, before it holds anything: no process of the tool user may read
		// its /proc entries or trace it (dumpable.go).
		setNonDumpable()
	}
	var err error
	switch os.Args[1] {
	case "init":
		err = runInit(os.Args[2:])
	case "serve":
		err = runServe(os.Args[2:])
	case "attach":
		err = runAttach(os.Args[2:])
	case "revive":
		err = runRevive(os.Args[2:])
	case "install":
		err = runInstall(os.Args[2:])
	case keep.Command:
		err = runKeep(os.Args[2:])
	case launch.Command:
		// Only returns on failure, also written to the status fd when one is given.
		err = launch.Main(os.Args[2:])
		fmt.Fprintf(os.Stderr, "cws-agent launch: %v\n", err)
		os.Exit(126)
	case "version":
		fmt.Printf("cws-agent %s (protocol %d, commit %s)\n", version.Version, agent.ProtocolVersion, version.Commit)
	case "-h", "--help", "help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "cws-agent: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cws-agent %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `cws-agent is the in-sandbox agent of cws; cws starts and talks to it for you.

Usage:
  cws-agent init      run as the container's PID 1 (prepares /workspace, drops privileges, reaps)
  cws-agent serve     serve the agent protocol on the abstract socket @cws-agent (and on
                      /.cws-run/agent.sock, behind a secret handshake, when cws mounted it)
  cws-agent attach    bridge stdin/stdout to the agent (used by cws through docker exec)
  cws-agent install   copy this binary into a directory, and the socket secret into
                      /.cws-run (a Kubernetes pod's init container runs it)
  cws-agent revive    continue a stopped agent and restart serve (used by cws when the agent
                      stops answering)
  cws-agent launch    restrict execution with Landlock, then exec a command (by hand: serve
                      restricts each command itself, as it starts it)
  cws-agent keep      keep background processes and their output across serve restarts (used by serve)
  cws-agent version   print the release and protocol version
`)
}
