// Package docker is the Docker driver for sandboxes: it creates, starts, attaches to,
// inspects, heals (heal.go: an agent that stopped answering) and removes one hardened
// container per session, and injects the static cws-agent into any image through a
// read-only, content-addressed agent volume.
//
// Everything the driver owns carries the sandbox.Label* labels, so a restarted cws can
// find it again with List. The driver keeps no state besides the Docker client, whether
// the agent volume is known to be ready, and its warm pool (pool.go): started,
// agent-ready containers that Create binds to a session by name and bind record
// (bind.go), both on the engine, so that they too are found again after a restart.
package docker

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/docker/docker/client"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/pool"
	"github.com/cwsdev/cws/version"
)

// Defaults for the sandbox.Limits fields that are zero, and for Config.StopTimeout.
const (
	DefaultNanoCPUs     = 1_000_000_000 // 1 CPU
	DefaultMemoryBytes  = 1 << 30       // 1 GiB of memory, and no swap (MemorySwap == Memory)
	DefaultPids         = 256           // processes and threads
	DefaultNoFile       = 4096          // open files (RLIMIT_NOFILE, soft == hard)
	DefaultFileSize     = 1 << 30       // 1 GiB, the largest file a process may write (RLIMIT_FSIZE)
	DefaultTmpSizeBytes = 256 << 20     // 256 MiB tmpfs at /tmp
	DefaultStopTimeout  = 5 * time.Second
	DefaultUser         = sandbox.DefaultUser // the tool uid:gid when sandbox.Spec.User is empty
)

// Config configures a Driver.
type Config struct {
	// AgentBinary is the path of the static cws-agent binary that is injected into
	// every container. Required. It is hashed once by New; the hash names the agent
	// volume, so a new binary gets a new volume.
	AgentBinary string

	// StopTimeout is how long Stop waits after SIGTERM before Docker sends SIGKILL.
	// Docker counts it in whole seconds. Zero means DefaultStopTimeout (5 s).
	StopTimeout time.Duration

	// Log receives the driver's logs. Nil discards them.
	Log *slog.Logger

	// Instance names the cws deployment that owns the sandboxes (label cws.instance).
	// List sees only this instance's sandboxes, so two deployments (or test runs)
	// sharing one engine never reconcile away each other's. Empty means "default".
	Instance string

	// Defaults applies to every sandbox.Limits field that is zero in a Spec. Its own
	// zero fields mean the package defaults: NanoCPUs 1 CPU (1e9), MemoryBytes 1 GiB
	// (MemorySwap is set equal, so no swap), Pids 256, NoFile 4096, FileSizeBytes
	// 1 GiB, TmpSizeBytes 256 MiB.
	Defaults sandbox.Limits

	// Transport is how the host reaches agents: TransportAuto (""), TransportSocket or
	// TransportExec. Auto takes the socket path when the engine is local and SocketDir
	// is usable, the exec stream otherwise; Driver.Transport says which and why.
	Transport string

	// SocketDir is the host directory (absolute) under which each container gets its
	// socket directory, bind-mounted at agent.RunDir. Docker resolves bind sources on
	// the engine's host: when cws runs in a container, this path must be mounted at the
	// same path in cws's container. cws makes it mode 0700. Empty means
	// DefaultSocketDir (/var/run/cws/agent).
	SocketDir string
	// Pool asks for warm pools (pool.go): per image, how many started, agent-ready
	// containers to keep for Create to take. Empty means no pool: every create is cold.
	// RunPool fills them.
	Pool []PoolSize
	// PoolMax caps the pooled containers (ready and being made) over all images. Zero
	// means the sum of Pool's sizes.
	PoolMax int
	// PoolFillers is how many pooled containers are made at once. Zero means
	// DefaultPoolFillers (2).
	PoolFillers int
	// PoolOwner names this driver on its pooled containers (label cws.pool.owner): only
	// the driver of that owner hands them out or adopts them, so that replicas sharing
	// an engine never hand out one container twice. Replicas need distinct owners; a
	// restarted process keeps its own to adopt its pool. Empty means the host name.
	PoolOwner string
	// PoolMaxAge is how long a pooled container may wait for a session: older ones are
	// never handed out but replaced. Another owner's unbound pooled containers older
	// than twice this are removed (their replica is gone, or will not hand them out any
	// more). Zero means DefaultPoolMaxAge (1 h).
	PoolMaxAge time.Duration
	// PoolRefillHold is how long the refill waits after a pooled container was taken
	// (the sandbox handed out runs first); zero means pool.DefaultRefillHold (1 s),
	// negative none.
	PoolRefillHold time.Duration
	// PoolObserver receives the pool's measures. Nil measures nothing.
	PoolObserver PoolObserver
}

// DefaultInstance is the cws.instance of a driver whose Config names none.
const DefaultInstance = "default"

// Driver runs sandboxes as Docker containers. It is safe for concurrent use.
type Driver struct {
	cli         *client.Client
	log         *slog.Logger
	stopTimeout time.Duration
	defaults    sandbox.Limits
	instance    string

	// transport is the path to agents (socket or exec); socketDir is Config.SocketDir.
	transport   transport
	socketDir   string
	dialSockets bool // the engine is local and the socket path is not switched off

	agentPath   string
	agentSHA256 string // hex
	agentSize   int64
	agentVolume string // cws-agent-<version>-<12 hex>
	// agentPruneLabel, when set, is a label (key=value) PruneAgentVolumes also filters
	// on: tests prune only their own volumes, not those of other packages' tests
	// running beside them on the same engine.
	agentPruneLabel string

	// agentSem serializes populating the agent volume; agentReady is set, under it,
	// once the volume is known to be ready, and read without it (the creates that
	// follow never queue on agentSem).
	agentSem   chan struct{}
	agentReady atomic.Bool

	pool *pool.Pool // the warm pool; empty when none is configured
}

// New returns a Driver that talks to the Docker engine named by the environment
// (DOCKER_HOST and friends), negotiating the API version with it. It hashes the agent
// binary; it does not wait on the engine (a local one is asked in the background where
// its volumes live, for a warning: CheckVolumeFS).
func New(cfg Config) (*Driver, error) {
	if cfg.AgentBinary == "" {
		return nil, errors.New("docker driver: AgentBinary is required")
	}
	sum, size, err := hashFile(cfg.AgentBinary)
	if err != nil {
		return nil, fmt.Errorf("docker driver: hash agent binary: %w", err)
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker driver: client: %w", err)
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	stop := cfg.StopTimeout
	if stop <= 0 {
		stop = DefaultStopTimeout
	}
	if cfg.PoolOwner == "" {
		cfg.PoolOwner, _ = os.Hostname()
	}
	d := &Driver{
		cli:         cli,
		log:         log.With("component", "sandbox/docker"),
		stopTimeout: stop,
		defaults:    sandbox.WithDefaults(cfg.Defaults, packageDefaults),
		agentPath:   cfg.AgentBinary,
		agentSHA256: sum,
		agentSize:   size,
		agentVolume: agentVolumeName(sum),
		agentSem:    make(chan struct{}, 1),
		instance:    cmp.Or(cfg.Instance, DefaultInstance),
		socketDir:   filepath.Clean(cmp.Or(cfg.SocketDir, DefaultSocketDir)),
		pool: pool.New(pool.Config{Sizes: cfg.Pool, Max: cfg.PoolMax, Fillers: cfg.PoolFillers, Owner: cfg.PoolOwner,
			MaxAge: cfg.PoolMaxAge, RefillHold: cfg.PoolRefillHold, Observer: cfg.PoolObserver, Log: log.With("component", "sandbox/docker")}),
	}
	if err := d.chooseTransport(cfg.Transport, cli.DaemonHost()); err != nil {
		cli.Close()
		return nil, err
	}
	name, why := d.transport.get()
	d.log.Info("agent transport", "transport", name, "why", why)
	d.warnVolumeFS()
	return d, nil
}

// Close releases the Docker client. Sandboxes outlive the driver.
func (d *Driver) Close() error {
	return d.cli.Close()
}

// AgentVolume is the name of the volume that holds this driver's agent binary.
func (d *Driver) AgentVolume() string { return d.agentVolume }

// agentVolumeName is cws-agent-<version>-<first 12 hex of the binary's sha256>.
func agentVolumeName(sum string) string {
	return "cws-agent-" + version.Version + "-" + sum[:12]
}

func hashFile(path string) (sum string, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	if !st.Mode().IsRegular() {
		return "", 0, fmt.Errorf("%s is not a regular file", path)
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
