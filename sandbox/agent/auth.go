package agent

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The socket path: besides the abstract socket that `cws-agent attach` bridges to (the
// `docker exec` path, which Docker authenticates), the agent listens on a unix socket in
// a per-container directory that the host bind-mounts at RunDir. Whoever reaches that
// socket, and whatever the host finds at that path, is proven by a per-container secret
// before the usual Hello: the secret step exists only on the socket path, and the wire
// protocol after it is the same on both paths.
const (
	// RunDir is where the per-container socket directory is mounted in the container.
	RunDir = "/.cws-run"
	// SocketName is the agent's socket in RunDir (and in the host's directory).
	SocketName = "agent.sock"
	// SecretFile, in RunDir, carries the per-container secret (hex) to the agent's init,
	// which reads it while it is root and leaves it to the agent uid alone (0400).
	SecretFile = "secret"
	// EnvSecret carries the secret from init to serve (whose environment only the agent
	// uid can read); serve removes it from its environment, and commands never see it.
	// An older cws put it in the container's environment.
	EnvSecret = "CWS_AGENT_SECRET"
)

// ErrAuth is a failed secret handshake on the socket path: the peer is not the agent
// (or the host) that owns the secret.
var ErrAuth = errors.New("agent authentication failed")

// nonceSize is the length of each side's challenge.
const nonceSize = 32

// authFrame is one message of the secret handshake.
type authFrame struct {
	Nonce []byte `json:"nonce,omitempty"`
	MAC   []byte `json:"mac,omitempty"`
	OK    bool   `json:"ok,omitempty"`
	Error string `json:"error,omitempty"`
}

// Each side's proof is HMAC-SHA256(secret, role || own challenge || other challenge);
// the role keeps one side's answer from ever serving as the other's.
func proof(secret []byte, role string, first, second []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("cws-agent-auth-v1 " + role + "\x00"))
	m.Write(first)
	m.Write(second)
	return m.Sum(nil)
}

// AuthenticateAgent is the host's side of the secret handshake, run on a fresh
// connection before the Hello. It sends a challenge, checks the agent's answer, and only
// then answers the agent's challenge: a peer without the secret learns nothing that
// helps it (neither the secret nor a proof it could replay). A wrong answer is ErrAuth.
//
//	host  → agent  {nonce: Nh}
//	agent → host   {nonce: Na, mac: HMAC(s, "agent" Nh Na)}
//	host  → agent  {mac: HMAC(s, "host" Na Nh)}
//	agent → host   {ok: true}
func AuthenticateAgent(rw io.ReadWriter, secret []byte) error {
	if len(secret) == 0 {
		return fmt.Errorf("%w: no secret", ErrAuth)
	}
	nh := make([]byte, nonceSize)
	_, _ = rand.Read(nh)
	if err := writeAuth(rw, authFrame{Nonce: nh}); err != nil {
		return err
	}
	a, err := readAuth(rw)
	if err != nil {
		return err
	}
	if len(a.Nonce) != nonceSize || !hmac.Equal(a.MAC, proof(secret, "agent", nh, a.Nonce)) {
		return fmt.Errorf("%w: the peer did not prove the container's secret", ErrAuth)
	}
	if err := writeAuth(rw, authFrame{MAC: proof(secret, "host", a.Nonce, nh)}); err != nil {
		return err
	}
	ack, err := readAuth(rw)
	if err != nil {
		return err
	}
	if !ack.OK {
		return fmt.Errorf("%w: the agent refused the host: %s", ErrAuth, ack.Error)
	}
	return nil
}

// AuthenticateHost is the agent's side of the secret handshake (see AuthenticateAgent).
// A host that does not prove the secret is ErrAuth; the caller closes the connection.
func AuthenticateHost(rw io.ReadWriter, secret []byte) error {
	if len(secret) == 0 {
		return fmt.Errorf("%w: no secret", ErrAuth)
	}
	h, err := readAuth(rw)
	if err != nil {
		return err
	}
	if len(h.Nonce) != nonceSize {
		return fmt.Errorf("%w: malformed challenge", ErrAuth)
	}
	na := make([]byte, nonceSize)
	_, _ = rand.Read(na)
	if err := writeAuth(rw, authFrame{Nonce: na, MAC: proof(secret, "agent", h.Nonce, na)}); err != nil {
		return err
	}
	h2, err := readAuth(rw)
	if err != nil {
		return err
	}
	if !hmac.Equal(h2.MAC, proof(secret, "host", na, h.Nonce)) {
		_ = writeAuth(rw, authFrame{Error: "the host did not prove the container's secret"})
		return fmt.Errorf("%w: the host did not prove the container's secret", ErrAuth)
	}
	return writeAuth(rw, authFrame{OK: true})
}

func writeAuth(w io.Writer, f authFrame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if err := writeRaw(w, b, nil); err != nil {
		return fmt.Errorf("%w: send: %v", ErrAuth, err)
	}
	return nil
}

// readAuth reads one handshake message; they are small, so a larger frame is refused
// before it is read.
func readAuth(r io.Reader) (authFrame, error) {
	var f authFrame
	hb, body, err := readRawMax(r, 4<<10, 0)
	if err != nil {
		return f, fmt.Errorf("%w: receive: %v", ErrAuth, err)
	}
	if len(body) != 0 || json.Unmarshal(hb, &f) != nil {
		return f, fmt.Errorf("%w: malformed handshake message", ErrAuth)
	}
	return f, nil
}

// The agent's own identity (package ident): the driver gives every container an agent
// uid:gid besides the tool uid:gid (CWS_UID_GID), and the agent's init drops to it.
const (
	// EnvAgentUser carries the agent's uid:gid to its init.
	EnvAgentUser = "CWS_AGENT_UID_GID"
	// DefaultAgentUser is the agent's uid:gid when the driver names none: beside
	// nobody (65534), and no image's usual first user.
	DefaultAgentUser = "65533:65533"
)
