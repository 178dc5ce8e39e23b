// Package policy reads .cws-policy.json and decides, for one tool call, whether a
// path, a size, a command, an environment or an unconfirmed call is allowed.
//
// Each tenant has a policy set by the operator: the ceiling. A .cws-policy.json in the
// workspace root may only narrow it (Policy.Narrow), and the result, an *Effective, is
// what the tool catalogue checks before anything reaches the sandbox. The path rules
// travel on to the in-container agent as a guard.Guard, which re-checks them on the
// symlink-resolved path. The policy guards the agent's tools; the container is the
// security boundary.
package policy

import "time"

// FileName is the policy file's name, in the workspace root and in the tenants'
// configuration.
const FileName = ".cws-policy.json"

// GitProtected are paths tools may read but never write, whatever the policy: git runs
// programs named in a repository's config (filter drivers, hooks), so writing them
// would let a file tool start a program the command allowlist never saw.
var GitProtected = []string{".git/config", ".git/hooks"}

// WorkspaceDir is where the workspace is mounted in the container (sandbox.WorkspaceDir).
const WorkspaceDir = "/workspace"

// Defaults that apply when a tenant's policy leaves the field unset (zero).
const (
	DefaultMaxFileSize = 10 << 20 // bytes: 10 MiB
	DefaultMaxEditSize = 1 << 20  // bytes: 1 MiB
	// DefaultMaxTerminals is how many running terminals a session may have.
	DefaultMaxTerminals = 8
	// DefaultTerminalIdle ends a terminal after this long with no viewer, no input and
	// no output.
	DefaultTerminalIdle = Duration(30 * time.Minute)
)

// Toolsets a tenant may enable.
const (
	ToolsetCore   = "core"   // seeds/coding-environment-tools.md and the daily additions
	ToolsetVSCode = "vscode" // seeds/vscode-mcp-plugin-tools.md
	ToolsetLSP    = "lsp"    // seeds/mcpls-lsp-tools.md
	// ToolsetTerminal is the interactive terminals: a program on a PTY, its screen.
	ToolsetTerminal = "terminal"
)

// AllToolsets is every toolset, in listing order.
var AllToolsets = []string{ToolsetCore, ToolsetVSCode, ToolsetLSP, ToolsetTerminal}

// DefaultEnvAllowlist is the envAllowlist of a tenant that sets none. An entry ending
// in "*" allows every name with that prefix.
var DefaultEnvAllowlist = []string{"HOME", "LANG", "LANGUAGE", "LC_*", "TERM", "TZ", "NO_COLOR"}

// Policy is one .cws-policy.json: the seed's seven fields and requireLandlock, which a
// workspace file may use to narrow its tenant's policy, then cws's tenant-only fields.
//
// For the list fields nil (omitted) and empty ([]) differ: omitted leaves the list
// unrestricted (or, in a workspace file, does not narrow), [] allows nothing. The
// JSON tags use omitzero, so a Policy survives a Marshal/Unmarshal round trip with
// that difference intact.
type Policy struct {
	// AllowedPaths are globs (guard.Match) a path must match. Omitted: every path.
	AllowedPaths []string `json:"allowedPaths,omitzero"`
	// DeniedPaths are globs no path may match. Deny wins over allow.
	DeniedPaths []string `json:"deniedPaths,omitzero"`
	// MaxFileSize is the largest file readFile returns and writeFile writes, in bytes.
	// Zero means DefaultMaxFileSize.
	MaxFileSize int64 `json:"maxFileSize,omitzero"`
	// MaxEditSize is the largest edit (replacement text or patch), in bytes. Zero means
	// DefaultMaxEditSize.
	MaxEditSize int64 `json:"maxEditSize,omitzero"`
	// AllowedCommands are the program names runCommand may start, matched exactly.
	// Omitted: any program on SafePath; []: none.
	AllowedCommands []string `json:"allowedCommands,omitzero"`
	// EnvAllowlist names the variables a call may set ("LC_*" for a prefix). Omitted in
	// a tenant policy: DefaultEnvAllowlist. Some names are never allowed (CheckEnv).
	EnvAllowlist []string `json:"envAllowlist,omitzero"`
	// ConfirmationRequired lists tool names whose calls need options.confirmed: true.
	ConfirmationRequired []string `json:"confirmationRequired,omitzero"`
	// RequireLandlock refuses commands (runCommand, startProcess, the git tools) with
	// ErrCommand where the sandbox's kernel cannot enforce allowedCommands with Landlock,
	// instead of running them unenforced. It has no effect when allowedCommands is
	// omitted. A workspace file may turn it on, never off.
	RequireLandlock bool `json:"requireLandlock,omitzero"`

	// Limits are the container's resources. Nil means the server's defaults.
	Limits *Limits `json:"limits,omitzero"`
	// SessionTTL is how long an idle session lives. Zero means the server's default.
	SessionTTL Duration `json:"sessionTTL,omitzero"`
	// MaxLifetime is how long a session lives at most, renewed or not. Zero means the
	// server's default.
	MaxLifetime Duration `json:"maxLifetime,omitzero"`
	// MaxSessions is how many sessions the tenant may hold at once. Zero means no limit.
	MaxSessions int `json:"maxSessions,omitzero"`
	// SuspendAfter suspends a session after this long without a tool call: its sandbox
	// stops, its files stay, and the next call wakes it. Zero means the server's
	// default (cws serve --suspend-after). A workspace file may only shorten it.
	SuspendAfter Duration `json:"suspendAfter,omitzero"`
	// ArchiveAfter moves a session suspended this long into the snapshot store, freeing
	// its volume. Zero means the server's default (--archive-after).
	ArchiveAfter Duration `json:"archiveAfter,omitzero"`
	// MaxSnapshots is how many snapshots the tenant may keep. Zero means no limit.
	MaxSnapshots int `json:"maxSnapshots,omitzero"`
	// MaxSnapshotBytes bounds the file contents of all the tenant's snapshots
	// together (as taken, before deduplication). Zero means no limit.
	MaxSnapshotBytes int64 `json:"maxSnapshotBytes,omitzero"`
	// SnapshotTTL removes a snapshot this long after it was taken. Zero means never.
	SnapshotTTL Duration `json:"snapshotTTL,omitzero"`
	// Images are the images a session may use; the first is the default. Empty means
	// the server's default image only.
	Images []string `json:"images,omitzero"`
	// Network is how the workspace reaches out: false (not at all), true (any public
	// name, through the egress proxy), {"allow", "deny"} (names the proxy lets
	// through), or "direct" (a network device of its own, no proxy: tenants file
	// only, unsafe on a cloud host). See network.go. A workspace file may narrow it.
	Network *Network `json:"network,omitzero"`
	// Secrets are the tenant's secrets a session may ask for (by name); omitted: any of
	// them, [] none. Tenants file only.
	Secrets []string `json:"secrets,omitzero"`
	// Egress limits the egress proxy's connections.
	Egress *Egress `json:"egress,omitzero"`
	// PreviewPorts are the ports a preview URL may reach ([3000, "8000-8099"]); omitted
	// or empty: none. A workspace file may narrow it.
	PreviewPorts Ports `json:"previewPorts,omitzero"`
	// Toolsets the tenant may use (ToolsetCore, …). Omitted means AllToolsets; a
	// connection may narrow further with ?toolsets=.
	Toolsets []string `json:"toolsets,omitzero"`
	// Rate limits the tenant's tool calls. Nil means no limit.
	Rate *Rate `json:"rate,omitzero"`
	// MaxTerminals is how many running terminals (a program on a PTY) a session may
	// have. Zero means DefaultMaxTerminals.
	MaxTerminals int `json:"maxTerminals,omitzero"`
	// TerminalIdle ends a terminal after this long with no viewer attached, no input and
	// no output. Zero means DefaultTerminalIdle.
	TerminalIdle Duration `json:"terminalIdle,omitzero"`
	// AllowPolicyWrites lets tools write the workspace's .cws-policy.json. False (the
	// default) protects it.
	AllowPolicyWrites bool `json:"allowPolicyWrites,omitzero"`
}

// DirectNetwork reports network: "direct", the sandbox's own network device (no
// proxy). network: true is not direct: it goes through the proxy.
func (p *Policy) DirectNetwork() bool { return p.Network != nil && p.Network.Direct }

// Limits are a session container's resources. Zero in any field means the server's
// default for it.
type Limits struct {
	CPUs       float64 `json:"cpus,omitzero"`       // CPUs, fractional (NanoCPUs)
	MemoryMB   int64   `json:"memoryMB,omitzero"`   // MiB of memory, swap included
	Pids       int64   `json:"pids,omitzero"`       // processes (PidsLimit)
	DiskMB     int64   `json:"diskMB,omitzero"`     // MiB of workspace volume
	NoFile     int64   `json:"nofile,omitzero"`     // open files per process (ulimit nofile)
	FileSizeMB int64   `json:"fileSizeMB,omitzero"` // MiB, the largest file a process may write (ulimit fsize)
}

// Rate is a token bucket over a tenant's tool calls.
type Rate struct {
	PerSecond float64 `json:"perSecond,omitzero"` // calls per second refilled; zero means no limit
	Burst     int     `json:"burst,omitzero"`     // bucket size; zero means max(1, ceil(PerSecond))
}

// Default returns the policy of a tenant that has none: every path, no denied path,
// 10 MiB files, 1 MiB edits, any command on SafePath, DefaultEnvAllowlist, no
// confirmation, every toolset, no network, and server defaults for the rest. Narrowing
// it gives the same Effective as narrowing a Policy parsed from "{}".
func Default() *Policy {
	return &Policy{
		AllowedPaths: []string{"**"},
		MaxFileSize:  DefaultMaxFileSize,
		MaxEditSize:  DefaultMaxEditSize,
		EnvAllowlist: clone(DefaultEnvAllowlist),
		Toolsets:     clone(AllToolsets),
	}
}

// EnabledToolsets returns the toolsets p allows: Toolsets, or AllToolsets if unset.
func (p *Policy) EnabledToolsets() []string {
	if p.Toolsets == nil {
		return clone(AllToolsets)
	}
	return clone(p.Toolsets)
}

// clone copies s, keeping nil nil and empty empty.
func clone(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string{}, s...)
}
