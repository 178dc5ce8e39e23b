package policy

import (
	"fmt"
	"github.com/cwsdev/cws/secrets"
	"slices"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent/guard"
)

// MaxListLen is the most entries any list field may hold. Every path check walks the
// pattern lists, and a workspace file is written by whoever controls the workspace.
const MaxListLen = 256

// Validate reports the first invalid value in p, wrapping ErrInvalid and naming the
// field: negative sizes, limits or durations; path patterns guard.ValidPattern refuses;
// commands that are not bare program names; malformed envAllowlist entries; empty
// tool or image names; unknown toolsets; lists longer than MaxListLen.
func (p *Policy) Validate() error {
	for _, l := range []struct {
		field string
		list  []string
		check func(string) error
	}{
		{"allowedPaths", p.AllowedPaths, guard.ValidPattern},
		{"deniedPaths", p.DeniedPaths, guard.ValidPattern},
		{"allowedCommands", p.AllowedCommands, validCommand},
		{"envAllowlist", p.EnvAllowlist, validEnvEntry},
		{"confirmationRequired", p.ConfirmationRequired, validName},
		{"images", p.Images, validName},
		{"toolsets", p.Toolsets, validToolset},
		{"secrets", p.Secrets, validSecretName},
	} {
		if len(l.list) > MaxListLen {
			return invalidf("%s has more than %d entries", l.field, MaxListLen)
		}
		for i, v := range l.list {
			if err := l.check(v); err != nil {
				return invalidf("%s[%d]: %v", l.field, i, err)
			}
		}
	}
	for _, n := range []struct {
		field string
		v     float64
	}{
		{"maxFileSize", float64(p.MaxFileSize)},
		{"maxEditSize", float64(p.MaxEditSize)},
		{"sessionTTL", float64(p.SessionTTL)},
		{"maxLifetime", float64(p.MaxLifetime)},
		{"maxSessions", float64(p.MaxSessions)},
		{"suspendAfter", float64(p.SuspendAfter)},
		{"archiveAfter", float64(p.ArchiveAfter)},
		{"maxSnapshots", float64(p.MaxSnapshots)},
		{"maxSnapshotBytes", float64(p.MaxSnapshotBytes)},
		{"snapshotTTL", float64(p.SnapshotTTL)},
		{"maxTerminals", float64(p.MaxTerminals)},
		{"terminalIdle", float64(p.TerminalIdle)},
	} {
		if n.v < 0 {
			return invalidf("%s must not be negative", n.field)
		}
	}
	if l := p.Limits; l != nil {
		if l.CPUs < 0 || l.MemoryMB < 0 || l.Pids < 0 || l.DiskMB < 0 || l.NoFile < 0 || l.FileSizeMB < 0 {
			return invalidf("limits must not be negative")
		}
	}
	if r := p.Rate; r != nil && (r.PerSecond < 0 || r.Burst < 0) {
		return invalidf("rate must not be negative")
	}
	return nil
}

// validCommand accepts a bare program name: what CheckCommand can ever allow.
func validCommand(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("%q is not a program name", name)
	case strings.Contains(name, "/"):
		return fmt.Errorf("%q: list a bare program name, resolved on %s", name, SafePath)
	case strings.ContainsFunc(name, isSpaceOrControl):
		return fmt.Errorf("%q: a program name has no spaces; arguments go in args", name)
	}
	return nil
}

// validEnvEntry accepts a variable name, or a name prefix followed by "*".
func validEnvEntry(e string) error {
	name, _ := strings.CutSuffix(e, "*")
	if name == "" && e == "*" {
		return nil
	}
	if !isEnvName(name) {
		return fmt.Errorf("%q is not a variable name (letters, digits, _; optional trailing *)", e)
	}
	return nil
}

func validName(s string) error {
	if s == "" || strings.ContainsFunc(s, isSpaceOrControl) {
		return fmt.Errorf("%q is not a name", s)
	}
	return nil
}

func validToolset(s string) error {
	if !slices.Contains(AllToolsets, s) {
		return fmt.Errorf("unknown toolset %q (want one of %s)", s, strings.Join(AllToolsets, ", "))
	}
	return nil
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }

// isEnvName reports whether s is a portable variable name: [A-Za-z_][A-Za-z0-9_]*.
func isEnvName(s string) bool {
	if s == "" || ('0' <= s[0] && s[0] <= '9') {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// validSecretName checks an entry of secrets: a secret's name.
func validSecretName(s string) error {
	if !secrets.ValidName(s) {
		return fmt.Errorf("%q is not a secret name (%s)", s, secrets.NameRule)
	}
	return nil
}
