// Package sandbox describes a session's sandbox: the Spec a driver creates it from,
// the labels that let cws find what it owns, and the Info a driver reports back.
// Drivers (sandbox/docker) implement the lifecycle; the agent (sandbox/agent) runs inside.
package sandbox

import (
	"context"
	"errors"
	"time"
)

// Labels every managed container and volume carries.
const (
	LabelManaged  = "cws.managed"  // "true"
	LabelInstance = "cws.instance" // which cws deployment owns it (drivers list only their own)
	LabelSession  = "cws.session"  // session id
	LabelTenant   = "cws.tenant"   // tenant id
	LabelExpires  = "cws.expires"  // RFC 3339 hard expiry
	LabelSubject  = "cws.sub"      // the JWT subject that created the session
	LabelImage    = "cws.image"    // the workspace image, as requested
	LabelAgent    = "cws.agent"    // on the agent volume: the agent's version-hash
	LabelDefault  = "cws.default"  // "true" on the caller's default session (/mcp without a session claim)
	// LabelSocketDir names the container's agent socket directory under the driver's
	// socket dir: random at create, never derived from the session.
	LabelSocketDir = "cws.sockdir"
	// LabelSecret holds the secret of the container's agent socket (hex), for cws's
	// eyes only: labels never reach the container. The agent gets it from a file in its
	// socket directory (see sandbox/agent.SecretFile), never from its environment.
	LabelSecret = "cws.agentsecret"
)

// Errors drivers return, wrapped with context. Compare with errors.Is.
var (
	// ErrNotFound: the sandbox (container) does not exist: it was removed.
	ErrNotFound = errors.New("sandbox not found")
	// ErrStopped: the sandbox exists but is not running (an engine restart, a docker
	// stop); Start brings it back with its workspace.
	ErrStopped = errors.New("sandbox is not running")
)

// WorkspaceDir is where the session's workspace volume is mounted.
const WorkspaceDir = "/workspace"

// OrphanVolumeAge is how old a session's workspace volume must be before a sweep may
// take it for an orphan when no container uses it: a create makes the volume a moment
// before its container, and never takes this long.
const OrphanVolumeAge = 10 * time.Minute

// AgentDir is where the read-only agent volume is mounted.
const AgentDir = "/.cws"

// Spec is what a driver needs to create one session's sandbox.
type Spec struct {
	Session string    // session id; names the container and the volume
	Tenant  string    // tenant id, recorded as a label
	Subject string    // the creating subject, recorded as a label
	Image   string    // any image; the agent is injected
	Expires time.Time // hard expiry, recorded as a label; zero means none
	Network bool      // a route of its own (bridge; the policy's network: "direct"); false: NetworkMode none, out only through the agent's egress proxy
	User    string    // uid:gid the agent and tool processes run as; empty means "1000:1000"
	Env     map[string]string
	Labels  map[string]string // extra labels; the cws.* ones above always win
	Limits  Limits
	Default bool // the caller's default session: labelled cws.default=true for re-adoption

	// WorkspaceTmpfsBytes, for tests only, mounts /workspace as a tmpfs of this size
	// instead of the session's volume, so that a full disk can be provoked. Its files
	// die with the container. Zero (always, in production) means the volume.
	WorkspaceTmpfsBytes int64
}

// Limits are the sandbox's resource limits. Zero means the driver default.
type Limits struct {
	NanoCPUs      int64 // CPU in units of 1e-9 CPUs
	MemoryBytes   int64 // memory, equal to memory+swap (no swap)
	Pids          int64 // max tasks (processes and threads)
	NoFile        int64 // RLIMIT_NOFILE
	FileSizeBytes int64 // RLIMIT_FSIZE
	TmpSizeBytes  int64 // size of the /tmp tmpfs
}

// Info is what a driver knows about one sandbox.
type Info struct {
	ID      string // container id
	Session string
	Tenant  string
	Subject string
	Image   string
	Expires time.Time
	Running bool
	Volume  string // the workspace volume's name
	// Default marks the caller's default session (label cws.default=true).
	Default bool
	// Deleted marks a sandbox whose removal has begun (the driver marks it first), or
	// that the engine is removing: it must never be adopted again.
	Deleted bool
}

// Stats is what the engine says a sandbox uses now.
type Stats struct {
	CPUSeconds      float64 // CPU time used since it started
	MemoryBytes     int64   // memory in use
	MemoryPeakBytes int64   // the most it used, where the engine knows (0: unknown)
	Processes       int     // processes (pids) in it
}

// StatsReader is what a driver may implement to say what sandboxes use: one engine
// request per sandbox at most (fewer where the engine answers for many at once).
// Sandboxes it can't read are left out of the answer.
type StatsReader interface {
	Stats(ctx context.Context, ids []string) (map[string]Stats, error)
}
