package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/cwsdev/cws/sandbox/agent/ident"
)

// actAsTool gives serve the tool user's fs identity when it runs as an agent uid of
// its own (init dropped to CWS_AGENT_UID_GID): workspace files are then opened with the
// tool user's permissions and made with its ownership, and every process serve starts
// runs as the tool user (ident.Credential). An agent that is the tool user needs none
// of it: in same-uid mode (sameUID) that is by design, and the tool processes' Landlock
// domains keep them out (init.go); otherwise it is an older cws's container.
func actAsTool(log *slog.Logger, sameUID bool) error {
	uid, gid, err := parseUIDGID(os.Getenv("CWS_UID_GID"))
	if err != nil {
		return err
	}
	if sameUID {
		// Nothing to take: the agent's own ids are the tool user's (ident.Same).
		return ident.UseToolFS(ident.Tool{UID: os.Geteuid(), GID: os.Getegid()})
	}
	if os.Geteuid() == uid {
		log.Warn("the agent runs as the tool user: workspace processes can signal and trace it", "uid", uid)
		return nil
	}
	if err := ident.UseToolFS(ident.Tool{UID: uid, GID: gid}); err != nil {
		return fmt.Errorf("take the tool user's fs identity %d:%d: %w (the agent needs CAP_SETUID and CAP_SETGID)", uid, gid, err)
	}
	log.Info("agent identity", "agent_uid", os.Geteuid(), "tool_uid", uid, "tool_gid", gid)
	return nil
}

// peerListener serves only peers that run as the agent's own uid or as root (what
// `cws-agent attach` runs as, through docker exec) on the abstract socket, which every
// process in the container's network namespace can reach. A tool process that connects
// is closed at once: it must never speak for cws.
type peerListener struct {
	*net.UnixListener
	log *slog.Logger
}

func (l peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		uid, err := peerUID(c)
		if err == nil && (uid == os.Geteuid() || uid == 0) {
			return c, nil
		}
		l.log.Warn("refused a connection on the agent socket", "peer_uid", uid, "err", err)
		c.Close()
	}
}
