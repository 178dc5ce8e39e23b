package policy

import (
	"slices"
	"time"

	"github.com/cwsdev/cws/egress"

	"github.com/cwsdev/cws/sandbox/agent/guard"
)

// Effective is the policy one tool call is checked against: a tenant's policy narrowed
// by its workspace's .cws-policy.json. It is immutable and safe for concurrent use.
// Get one from Policy.Narrow; the zero Effective is not usable.
type Effective struct {
	guard       guard.Guard
	maxFileSize int64
	maxEditSize int64
	commands    [][]string // program names must be in every list; no lists: any
	env         [][]string // variable names must match every list; never empty
	confirm     []string
	landlock    bool // requireLandlock
	suspend     time.Duration
	egress      egress.Policy
	preview     []Ports // a port must be in each
	terminals   int
	termIdle    time.Duration
}

// Narrow returns tenant's policy narrowed by ws, the workspace's .cws-policy.json (nil
// if there is none). A nil tenant is Default(). Both should come from Parse and
// ParseWorkspace. The workspace can only take away:
//
//   - allowedPaths: a path must match both lists (each is a guard allow-set);
//   - deniedPaths: the union;
//   - maxFileSize, maxEditSize: the smaller; a workspace value larger than the
//     tenant's (or the default) is ignored, never an error, so a repository's file
//     works under any tenant;
//   - allowedCommands: the intersection (omitted on both sides: any program);
//   - envAllowlist: a name must pass both lists (tenant omitted: DefaultEnvAllowlist);
//   - confirmationRequired: the union;
//   - requireLandlock: either side turns it on;
//   - suspendAfter: the shorter (zero on either side: the other).
//
// ws's tenant-only fields are ignored (ParseWorkspace refuses them anyway). FileName
// itself is protected from writes unless tenant.AllowPolicyWrites.
func (tenant *Policy) Narrow(ws *Policy) *Effective {
	if tenant == nil {
		tenant = Default()
	}
	e := &Effective{
		maxFileSize: orDefault(tenant.MaxFileSize, DefaultMaxFileSize),
		maxEditSize: orDefault(tenant.MaxEditSize, DefaultMaxEditSize),
		env:         [][]string{clone(tenant.EnvAllowlist)},
		confirm:     clone(tenant.ConfirmationRequired),
		landlock:    tenant.RequireLandlock,
		suspend:     tenant.SuspendAfter.Std(),
		terminals:   int(orDefault(int64(tenant.MaxTerminals), DefaultMaxTerminals)),
		termIdle:    time.Duration(orDefault(int64(tenant.TerminalIdle), int64(DefaultTerminalIdle))),
	}
	if tenant.PreviewPorts.raw != nil {
		e.preview = []Ports{tenant.PreviewPorts}
	}
	var wsNet *Network
	if ws != nil {
		wsNet = ws.Network
	}
	e.egress = narrowNetwork(tenant.Network, wsNet)
	if tenant.Egress != nil {
		e.egress.MaxConns = tenant.Egress.MaxConnections
	}
	if e.env[0] == nil {
		e.env[0] = clone(DefaultEnvAllowlist)
	}
	e.guard.Deny = clone(tenant.DeniedPaths)
	e.guard.Protect = clone(GitProtected)
	if !tenant.AllowPolicyWrites {
		e.guard.Protect = append(e.guard.Protect, FileName)
	}
	addSet(&e.guard.Allow, tenant.AllowedPaths)
	addSet(&e.commands, tenant.AllowedCommands)
	if ws == nil {
		return e
	}
	addSet(&e.guard.Allow, ws.AllowedPaths)
	addSet(&e.commands, ws.AllowedCommands)
	addSet(&e.env, ws.EnvAllowlist)
	e.guard.Deny = union(e.guard.Deny, ws.DeniedPaths)
	e.confirm = union(e.confirm, ws.ConfirmationRequired)
	e.landlock = e.landlock || ws.RequireLandlock
	if ws.PreviewPorts.raw != nil && len(e.preview) > 0 {
		e.preview = append(e.preview, ws.PreviewPorts)
	}
	if ws.MaxFileSize > 0 {
		e.maxFileSize = min(e.maxFileSize, ws.MaxFileSize)
	}
	if ws.MaxEditSize > 0 {
		e.maxEditSize = min(e.maxEditSize, ws.MaxEditSize)
	}
	if w := ws.SuspendAfter.Std(); w > 0 && (e.suspend == 0 || w < e.suspend) {
		e.suspend = w
	}
	return e
}

// Guard returns the path rules, for the in-container agent to re-check resolved paths.
func (e *Effective) Guard() guard.Guard {
	g := guard.Guard{Deny: clone(e.guard.Deny), Protect: clone(e.guard.Protect)}
	for _, set := range e.guard.Allow {
		g.Allow = append(g.Allow, clone(set))
	}
	return g
}

// MaxFileSize is the largest file, in bytes, that may be read or written.
func (e *Effective) MaxFileSize() int64 { return e.maxFileSize }

// MaxEditSize is the largest edit, in bytes.
func (e *Effective) MaxEditSize() int64 { return e.maxEditSize }

// AllowedCommands returns the program names CheckCommand allows, or nil if any
// program on SafePath is allowed. An empty, non-nil result allows none.
func (e *Effective) AllowedCommands() []string {
	if len(e.commands) == 0 {
		return nil
	}
	out := []string{}
	for _, c := range e.commands[0] {
		if allIn(e.commands[1:], c) && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// RequireLandlock reports whether commands must be refused rather than run where the
// sandbox cannot enforce AllowedCommands with Landlock.
func (e *Effective) RequireLandlock() bool { return e.landlock }

// SuspendAfter is how long the session may go without a call before it is suspended;
// zero means the server's default.
func (e *Effective) SuspendAfter() time.Duration { return e.suspend }

// MaxTerminals is how many running terminals the session may have (tenant-only).
func (e *Effective) MaxTerminals() int { return e.terminals }

// TerminalIdle ends a terminal with no viewer, input or output for this long
// (tenant-only).
func (e *Effective) TerminalIdle() time.Duration { return e.termIdle }

// ConfirmationRequired returns the tool names that need options.confirmed: true.
func (e *Effective) ConfirmationRequired() []string { return clone(e.confirm) }

// addSet appends list to sets unless it is nil (unrestricted).
func addSet(sets *[][]string, list []string) {
	if list != nil {
		*sets = append(*sets, clone(list))
	}
}

// union returns a followed by the entries of b it lacks.
func union(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	return a
}

func allIn(lists [][]string, s string) bool {
	for _, l := range lists {
		if !slices.Contains(l, s) {
			return false
		}
	}
	return true
}

func orDefault(v, def int64) int64 {
	if v > 0 {
		return v
	}
	return def
}
