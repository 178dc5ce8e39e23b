package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
)

// attachWait is how long attach waits for the agent to listen (a container just started).
const attachWait = 15 * time.Second

// runAttach copies stdin to the agent's socket and the socket to stdout, byte for byte.
func runAttach(args []string) error {
	var conn *net.UnixConn
	deadline := time.Now().Add(attachWait)
	for {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socketName, Net: "unix"})
		if err == nil {
			conn = c
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agent not listening on %s after %s: %w", socketName, attachWait, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := checkAgentPeer(conn); err != nil {
		conn.Close()
		return err
	}
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(conn, os.Stdin)
		_ = conn.CloseWrite()
		done <- err
	}()
	go func() {
		_, err := io.Copy(os.Stdout, conn)
		done <- err
	}()
	err := <-done
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return err
}

// checkAgentPeer makes sure the process listening on the abstract socket is the agent:
// it must run as the agent's uid (CWS_AGENT_UID_GID, or the tool uid for an agent that
// has none of its own). A tool process that bound the name first is refused.
func checkAgentPeer(c *net.UnixConn) error {
	want := os.Getenv(agent.EnvAgentUser)
	if want == "" {
		want = os.Getenv("CWS_UID_GID")
	}
	uid, _, err := parseUIDGID(want)
	if err != nil {
		return err
	}
	if os.Getenv(agent.EnvAgentUser) == "" && os.Geteuid() != 0 {
		// Run unprivileged with no agent uid named: same-uid mode (a pod whose
		// container runs as the tool user), where the agent is this very uid.
		uid = os.Geteuid()
	}
	got, err := peerUID(c)
	if err != nil {
		return fmt.Errorf("agent socket %s: peer credentials: %w", socketName, err)
	}
	if got != uid {
		return fmt.Errorf("agent socket %s is held by uid %d, not the agent (uid %d): refused", socketName, got, uid)
	}
	return nil
}
