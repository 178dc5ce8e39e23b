package sandbox

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
)

// What every driver does with a Spec the same way: validate it, fill its limits, turn
// it into labels, and read an Info back from those labels.

// More errors drivers return, wrapped with context. Compare with errors.Is.
var (
	// ErrExists: Create found a sandbox or workspace of that session already.
	ErrExists = errors.New("sandbox already exists")
	// ErrInvalid: the spec is unusable (bad session id, uid:gid or env name, or an
	// image the engine does not have).
	ErrInvalid = errors.New("invalid sandbox spec")
)

// DefaultUser is the tool uid:gid when Spec.User is empty.
const DefaultUser = "1000:1000"

var (
	// sessionRE keeps session ids valid in every engine's names (Docker container and
	// volume names, Kubernetes object names once lower-cased by the driver).
	sessionRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$`)
	userRE    = regexp.MustCompile(`^[0-9]{1,10}:[0-9]{1,10}$`)
)

// Validate rejects specs that an engine would reject less clearly, or that would be
// unsafe. Errors wrap ErrInvalid.
func Validate(spec Spec) error {
	if !sessionRE.MatchString(spec.Session) {
		return fmt.Errorf("%w: session id %q must match %s", ErrInvalid, spec.Session, sessionRE)
	}
	if spec.Image == "" {
		return fmt.Errorf("%w: image is required", ErrInvalid)
	}
	if spec.User != "" && !NonRoot(spec.User) {
		return fmt.Errorf("%w: user %q must be a numeric, non-root uid:gid", ErrInvalid, spec.User)
	}
	if spec.User != "" && SharesAgentIDs(spec.User) {
		return fmt.Errorf("%w: user %q shares a uid or gid with the agent (%s): pick another tool user", ErrInvalid, spec.User, agent.DefaultAgentUser)
	}
	for k := range spec.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("%w: env name %q", ErrInvalid, k)
		}
	}
	return nil
}

// ValidUser reports whether user is a numeric "uid:gid".
func ValidUser(user string) bool { return userRE.MatchString(user) }

// NonRoot reports whether user is "uid:gid", both numeric and neither 0.
func NonRoot(user string) bool {
	uid, gid, ok := ParseUser(user)
	return ok && uid != 0 && gid != 0
}

// ParseUser splits a numeric "uid:gid".
func ParseUser(user string) (uid, gid int, ok bool) {
	if !userRE.MatchString(user) {
		return 0, 0, false
	}
	u, g, _ := strings.Cut(user, ":")
	uid64, err1 := strconv.ParseUint(u, 10, 32)
	gid64, err2 := strconv.ParseUint(g, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return int(uid64), int(gid64), true
}

// SharesAgentIDs reports whether the tool uid:gid user has the agent's uid or gid: the
// agent must be out of reach of everything the tool user runs.
func SharesAgentIDs(user string) bool {
	u, g, _ := strings.Cut(user, ":")
	au, ag, _ := strings.Cut(agent.DefaultAgentUser, ":")
	return u == au || g == ag
}

// WithDefaults fills the zero fields of l from def.
func WithDefaults(l, def Limits) Limits {
	pick := func(v, d int64) int64 {
		if v > 0 {
			return v
		}
		return d
	}
	return Limits{
		NanoCPUs:      pick(l.NanoCPUs, def.NanoCPUs),
		MemoryBytes:   pick(l.MemoryBytes, def.MemoryBytes),
		Pids:          pick(l.Pids, def.Pids),
		NoFile:        pick(l.NoFile, def.NoFile),
		FileSizeBytes: pick(l.FileSizeBytes, def.FileSizeBytes),
		TmpSizeBytes:  pick(l.TmpSizeBytes, def.TmpSizeBytes),
	}
}

// Labels are spec.Labels plus the cws.* labels, with instance as cws.instance. Every
// key under the reserved "cws." prefix comes from the driver, never from the spec.
func Labels(spec Spec, instance string) map[string]string {
	l := make(map[string]string, len(spec.Labels)+8)
	for k, v := range spec.Labels {
		if !strings.HasPrefix(k, "cws.") {
			l[k] = v
		}
	}
	l[LabelManaged] = "true"
	l[LabelInstance] = instance
	l[LabelSession] = spec.Session
	l[LabelTenant] = spec.Tenant
	l[LabelSubject] = spec.Subject
	l[LabelImage] = spec.Image
	l[LabelExpires] = ""
	if spec.Default {
		l[LabelDefault] = "true"
	}
	if !spec.Expires.IsZero() {
		l[LabelExpires] = spec.Expires.UTC().Format(time.RFC3339)
	}
	return l
}

// SessionKeys are the labels that say whose a sandbox is: a pooled sandbox gets them
// only when it is bound to a session.
var SessionKeys = []string{LabelSession, LabelTenant, LabelSubject, LabelExpires, LabelDefault}

// InfoFrom builds an Info from a sandbox's id, labels and state. Volume is left to the
// driver, which knows how it names workspaces.
func InfoFrom(id string, labels map[string]string, running bool) Info {
	info := Info{
		ID:      id,
		Session: labels[LabelSession],
		Tenant:  labels[LabelTenant],
		Subject: labels[LabelSubject],
		Image:   labels[LabelImage],
		Running: running,
		Default: labels[LabelDefault] == "true",
	}
	if s := labels[LabelExpires]; s != "" {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			info.Expires = t
		}
	}
	return info
}

// Matches reports whether labels carries every label of want.
func Matches(labels, want map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
