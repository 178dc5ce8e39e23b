package docker

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
)

// How the host reaches a sandbox's agent (Config.Transport).
const (
	// TransportAuto picks TransportSocket when the engine is local (DOCKER_HOST unset
	// or unix://) and the socket directory is usable, TransportExec otherwise.
	TransportAuto = "auto"
	// TransportSocket dials the agent's unix socket in the container's directory under
	// Config.SocketDir, bind-mounted at agent.RunDir. The socket is proven by the
	// container's secret. A dial that fails falls back to the exec stream.
	TransportSocket = "socket"
	// TransportExec runs `cws-agent attach` with docker exec for every connection: the
	// path through dockerd and containerd-shim, and the only one to a remote engine.
	TransportExec = "exec"
)

// DefaultSocketDir is Config.SocketDir when it is empty.
const DefaultSocketDir = "/var/run/cws/agent"

// socketKeyRE is a container's socket directory name (label cws.sockdir): random, so
// that it is known at create and never depends on the session.
var socketKeyRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// transport is the driver's choice of path, and why. It can only go from socket to
// exec (when the engine proves unable to mount the directory), never back.
type transport struct {
	mu   sync.Mutex
	name string // TransportSocket or TransportExec
	why  string
}

func (t *transport) get() (name, why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.name, t.why
}

func (t *transport) set(name, why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.name, t.why = name, why
}

// Transport reports which path new connections to agents take (TransportSocket or
// TransportExec) and why, in a sentence for `cws doctor` and the logs. On the socket
// path, a connection whose dial fails still falls back to the exec stream.
func (d *Driver) Transport() (name, why string) { return d.transport.get() }

// SocketDir is the host directory under which each container gets its socket directory.
func (d *Driver) SocketDir() string { return d.socketDir }

// chooseTransport applies Config.Transport to the engine at daemonHost.
func (d *Driver) chooseTransport(want, daemonHost string) error {
	name, why, err := ResolveTransport(want, daemonHost, d.socketDir)
	if err != nil {
		return fmt.Errorf("docker driver: %w", err)
	}
	d.transport.set(name, why)
	// A container made with a socket directory is dialed on it whenever the engine is
	// local, even once new ones stop getting one.
	d.dialSockets = want != TransportExec && strings.HasPrefix(daemonHost, "unix://")
	return nil
}

// ResolveTransport is the path to agents that a Driver with transport want (see
// Config.Transport) and socketDir takes on the engine at daemonHost (as the Docker
// client names it, e.g. unix:///var/run/docker.sock), and why, in a sentence. On the
// socket path it prepares socketDir as the driver does (created if missing, mode
// 0700). A forced socket path that is impossible is an error; auto falls back to exec.
func ResolveTransport(want, daemonHost, socketDir string) (name, why string, err error) {
	switch want {
	case "", TransportAuto:
		want = TransportAuto
	case TransportSocket, TransportExec:
	default:
		return "", "", fmt.Errorf("transport %q: want auto, socket or exec", want)
	}
	if want == TransportExec {
		return TransportExec, "the exec stream was chosen (transport exec)", nil
	}
	if !strings.HasPrefix(daemonHost, "unix://") {
		if want == TransportSocket {
			return "", "", fmt.Errorf("transport socket needs a local engine (DOCKER_HOST unset or unix://), not %s", daemonHost)
		}
		return TransportExec, fmt.Sprintf("the engine at %s is remote: a socket on its host cannot be dialed from here", daemonHost), nil
	}
	if err := prepareSocketDir(socketDir); err != nil {
		if want == TransportSocket {
			return "", "", fmt.Errorf("socket directory: %w", err)
		}
		return TransportExec, fmt.Sprintf("the socket directory is unusable: %v", err), nil
	}
	return TransportSocket, fmt.Sprintf("the engine is local (%s): agents are dialed on their socket under %s, the exec stream is the fallback", daemonHost, socketDir), nil
}

// prepareSocketDir makes dir cws's own: created if missing, mode 0700 (only cws, and
// root, reach the containers' directories inside), and writable.
func prepareSocketDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("%s is not an absolute path", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("%s: make it mode 0700: %w (create it owned by cws's uid %d)", dir, err, os.Geteuid())
		}
	}
	probe, err := os.MkdirTemp(dir, ".probe-")
	if err != nil {
		return fmt.Errorf("%s is not writable by cws (uid %d): %w", dir, os.Geteuid(), err)
	}
	return os.Remove(probe)
}

// socketSetup is what Create adds to a container on the socket path.
type socketSetup struct {
	key    string // the directory's name under the socket dir (label cws.sockdir)
	secret string // hex; label cws.agentsecret, and agent.SecretFile in the directory
}

// newSocketDir makes a container's socket directory, writable by the agent's uid:gid
// (the agent's init makes it so too, when cws could not chown it).
// When cws is root it owns the directory to the tool uid (mode 0711); otherwise the
// directory is cws's with mode 0733. Either way it sits in cws's 0700 directory, so no
// one else reaches it, and the agent can make its socket there but never replace the
// directory itself.
func (d *Driver) newSocketDir(user string) (socketSetup, error) {
	var k [16]byte
	var s [32]byte
	_, _ = rand.Read(k[:])
	_, _ = rand.Read(s[:])
	ss := socketSetup{key: hex.EncodeToString(k[:]), secret: hex.EncodeToString(s[:])}
	if err := d.makeSocketDir(ss.key, user, ss.secret); err != nil {
		return socketSetup{}, err
	}
	return ss, nil
}

// makeSocketDir makes the socket directory named key for the agent's uid:gid user,
// with the secret in it (agent.SecretFile, 0600: the agent's init, root, takes it
// before any workspace process exists and leaves it to the agent uid alone).
func (d *Driver) makeSocketDir(key, user, secret string) error {
	dir := filepath.Join(d.socketDir, key)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, agent.SecretFile), []byte(secret), 0o600); err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("socket directory: %w", err)
	}
	uid, gid := toolIDs(user)
	mode := os.FileMode(0o711)
	if err := os.Chown(dir, uid, gid); err != nil {
		mode = 0o733
	}
	if err := os.Chmod(dir, mode); err != nil {
		os.Remove(dir)
		return fmt.Errorf("socket directory: %w", err)
	}
	return nil
}

// restoreSocketDir makes a stopped container's socket directory again if it is gone
// (the default lives on /var/run, a tmpfs: a reboot empties it), so that the engine
// can mount it when the container starts. Without it, the start would fail.
func (d *Driver) restoreSocketDir(c container.InspectResponse) {
	if c.Config == nil {
		return
	}
	key := c.Config.Labels[sandbox.LabelSocketDir]
	if !socketKeyRE.MatchString(key) {
		return
	}
	if _, err := os.Lstat(filepath.Join(d.socketDir, key)); !errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err := os.MkdirAll(d.socketDir, 0o700); err != nil {
		d.log.Warn("restore socket directory", "container", c.ID, "err", err)
		return
	}
	ss, _ := socketOf(c.Config.Labels, c.Config.Env)
	if err := d.makeSocketDir(key, agentUser(c), ss.secret); err != nil {
		d.log.Warn("restore socket directory", "container", c.ID, "err", err)
	}
}

// removeSocketDir removes a container's socket directory. RemoveAll never follows a
// link the agent planted there.
func (d *Driver) removeSocketDir(key string) {
	if !socketKeyRE.MatchString(key) {
		return
	}
	if err := os.RemoveAll(filepath.Join(d.socketDir, key)); err != nil {
		d.log.Warn("remove socket directory", "key", key, "err", err)
	}
}

// socketMount is the bind mount of a container's socket directory.
func (d *Driver) socketMount(key string) mount.Mount {
	return mount.Mount{Type: mount.TypeBind, Source: filepath.Join(d.socketDir, key), Target: agent.RunDir,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}}
}

// toolIDs parses "uid:gid" (already validated), defaulting to DefaultUser.
func toolIDs(user string) (int, int) {
	if user == "" {
		user = DefaultUser
	}
	u, g, _ := strings.Cut(user, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if err1 != nil || err2 != nil {
		return 1000, 1000
	}
	return uid, gid
}

// socketOf reads back a container's socket key and secret; ok is false when it was
// created without the socket path (exec transport, or an older cws).
func socketOf(labels map[string]string, env []string) (ss socketSetup, ok bool) {
	ss.key = labels[sandbox.LabelSocketDir]
	ss.secret = labels[sandbox.LabelSecret]
	for _, e := range env { // a container made by an older cws
		if v, found := strings.CutPrefix(e, agent.EnvSecret+"="); found && ss.secret == "" {
			ss.secret = v
		}
	}
	return ss, socketKeyRE.MatchString(ss.key) && ss.secret != ""
}
