package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cwsdev/cws/sandbox/agent"
)

// What init hands each serve it starts, besides its environment. Both variables are
// init's to serve alone: serve removes them from its environment first thing.
const (
	// envMode is modeSameUID when init started without root: same-uid mode.
	envMode     = "CWS_AGENT_MODE"
	modeSameUID = "same-uid"
	// envFDs names the descriptors serve inherits, as "secrets=3,tcp=4,unix=5":
	// a pipe with the secrets (same-uid mode), the TCP listener (agent.EnvListen), the
	// abstract socket's listener (same-uid mode).
	envFDs = "CWS_AGENT_FDS"
)

// secrets travel from init to serve through a pipe in same-uid mode, never through the
// environment: /proc/<pid>/environ keeps a process's first environment for good, and
// between its exec and its first instruction serve is still dumpable.
type secrets struct {
	Secret    string `json:"secret,omitempty"`    // the socket secret (agent.SecretFile)
	KeeperKey string `json:"keeperKey,omitempty"` // what serve and its keeper prove (keep.SetKey)
}

// handoff is what init holds for every serve it starts.
type handoff struct {
	sameUID bool
	secrets secrets  // same-uid mode; in root mode the secret is in serve's environment, as before
	tcp     *os.File // the listener on agent.EnvListen, or nil
	unix    *os.File // the abstract socket's listener (same-uid mode), or nil
}

// prepare gives cmd (a serve about to start) what init hands over: its environment
// entries and descriptors. done closes init's end of the secrets pipe once cmd started.
func (h *handoff) prepare(cmd *exec.Cmd) (done func(), err error) {
	var fds []string
	add := func(name string, f *os.File) {
		fds = append(fds, name+"="+strconv.Itoa(3+len(cmd.ExtraFiles)))
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	}
	done = func() {}
	if h.sameUID {
		cmd.Env = append(cmd.Env, envMode+"="+modeSameUID)
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		b, _ := json.Marshal(h.secrets)
		// A few hundred bytes: the pipe holds them until serve reads them.
		_, err = w.Write(b)
		w.Close()
		if err != nil {
			r.Close()
			return nil, err
		}
		add("secrets", r)
		done = func() { r.Close() }
	}
	if h.tcp != nil {
		add("tcp", h.tcp)
	}
	if h.unix != nil {
		add("unix", h.unix)
	}
	if len(fds) > 0 {
		cmd.Env = append(cmd.Env, envFDs+"="+strings.Join(fds, ","))
	}
	return done, nil
}

// inherited is what serve took over from init (takeInherited).
type inherited struct {
	sameUID bool
	secrets secrets
	tcp     net.Listener // nil: serve listens on agent.EnvListen itself, if it may
	unix    net.Listener // nil: serve listens on the abstract socket itself
}

// takeInherited takes what init handed serve and removes its traces from serve's
// environment.
func takeInherited() (inherited, error) {
	var in inherited
	in.sameUID = os.Getenv(envMode) == modeSameUID
	list := os.Getenv(envFDs)
	os.Unsetenv(envMode)
	os.Unsetenv(envFDs)
	if list == "" {
		return in, nil
	}
	for _, kv := range strings.Split(list, ",") {
		name, v, _ := strings.Cut(kv, "=")
		fd, err := strconv.Atoi(v)
		if err != nil || fd < 3 {
			return in, fmt.Errorf("%s: bad entry %q", envFDs, kv)
		}
		syscall.CloseOnExec(fd)
		f := os.NewFile(uintptr(fd), name)
		switch name {
		case "secrets":
			b, err := io.ReadAll(io.LimitReader(f, 64<<10))
			f.Close()
			if err != nil {
				return in, fmt.Errorf("read the secrets init handed over: %w", err)
			}
			if err := json.Unmarshal(b, &in.secrets); err != nil {
				return in, fmt.Errorf("the secrets init handed over: %w", err)
			}
		case "tcp", "unix":
			l, err := net.FileListener(f)
			f.Close()
			if err != nil {
				return in, fmt.Errorf("the %s listener init handed over: %w", name, err)
			}
			if name == "tcp" {
				in.tcp = l
			} else {
				in.unix = l
			}
		default:
			f.Close()
		}
	}
	return in, nil
}

// sameUIDInit is init's part in same-uid mode (started without root, as the tool
// user, without any capability: a Kubernetes pod): there is nothing to chown and no
// uid to drop to. It takes the socket secret from agent.SecretFile and removes the
// file, makes the keeper's key, makes the agent's state directory, and binds the
// abstract socket, all before any tool process exists. serve (and every tool
// process) runs as init's own ids: CWS_UID_GID is set to them for serve.
func sameUIDInit(log *slog.Logger, h *handoff) error {
	h.sameUID = true
	uid, gid := os.Geteuid(), os.Getegid()
	own := fmt.Sprintf("%d:%d", uid, gid)
	if s := os.Getenv("CWS_UID_GID"); s != "" && s != own {
		log.Warn("same-uid mode: the agent and the tools run as init's own ids, not CWS_UID_GID's", "CWS_UID_GID", s, "uid_gid", own)
	}
	if s := os.Getenv(agent.EnvAgentUser); s != "" && s != own {
		log.Warn("same-uid mode: the agent runs as init's own ids, not "+agent.EnvAgentUser+"'s (cws-agent attach checks the agent against it)", agent.EnvAgentUser, s, "uid_gid", own)
	}
	os.Setenv("CWS_UID_GID", own)
	secret, err := takeSecretFile(log, filepath.Join(agent.RunDir, agent.SecretFile))
	if err != nil {
		return err
	}
	h.secrets.Secret = secret
	if secret == "" {
		os.Unsetenv(agent.EnvSecret) // an older cws's, in the container's environment: not for serve
	}
	var k [32]byte
	_, _ = rand.Read(k[:])
	h.secrets.KeeperKey = hex.EncodeToString(k[:])
	if !useRunDirState() {
		log.Warn("same-uid mode without a socket directory: the agent's state stays on /tmp, where the tools can change it", "dir", agent.RunDir)
	}
	if err := os.MkdirAll(agentStateDir, 0o700); err != nil {
		return fmt.Errorf("agent state %s: %w", agentStateDir, err)
	}
	// The abstract socket stays bound by init for the container's life: no tool
	// process can take the name while serve restarts, and none can connect to it
	// (every tool process is in a Landlock domain scoped for abstract sockets).
	l, err := net.Listen("unix", socketName)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", socketName, err)
	}
	h.unix, err = l.(*net.UnixListener).File()
	l.Close()
	if err != nil {
		return fmt.Errorf("listen on %s: %w", socketName, err)
	}
	return nil
}

// takeSecretFile reads the socket secret from p (agent.SecretFile in agent.RunDir) and
// removes the file, so that no process started later (every tool process runs as this
// same uid) can read it. A file that can't be removed is said in the log, and the
// agent goes on: the directory is the host's. No file (or not a regular file, never
// followed nor waited on): no secret.
func takeSecretFile(log *slog.Logger, p string) (string, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("agent secret %s: %w", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		log.Warn("agent secret: not a regular file, ignored", "path", p)
		return "", nil
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("agent secret %s: %w", p, err)
	}
	if err := os.Remove(p); err != nil {
		log.Warn("agent secret: could not remove the file: a process of this uid may read it", "path", p, "err", err)
	} else {
		log.Info("agent secret taken and removed", "path", p)
	}
	return strings.TrimSpace(string(b)), nil
}

// listenTCP binds agent.EnvListen, when it is set and there is a secret to prove, and
// returns the listener's descriptor for the serves init starts; nil otherwise.
func listenTCP(log *slog.Logger, secret string) *os.File {
	addr := os.Getenv(agent.EnvListen)
	if addr == "" {
		return nil
	}
	if secret == "" {
		log.Warn("not listening on TCP: no secret to prove (" + agent.SecretFile + " in " + agent.RunDir + ")")
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Warn("not listening on TCP", "addr", addr, "err", err)
		return nil
	}
	f, err := l.(*net.TCPListener).File()
	l.Close()
	if err != nil {
		log.Warn("not listening on TCP", "addr", addr, "err", err)
		return nil
	}
	log.Info("agent listening on TCP, behind the secret handshake", "addr", addr)
	return f
}
