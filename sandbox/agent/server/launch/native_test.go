package launch

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cwsdev/cws/internal/testenv"
)

// nativeLauncher is the native launcher built from its C source (testenv).
func nativeLauncher(t testing.TB) string {
	t.Helper()
	return testenv.NativeLauncher(t)
}

// forEachLauncher runs test with the agent's own launcher (this test binary, standing in
// for `cws-agent launch`) and with the native one, which must behave alike.
func forEachLauncher(t *testing.T, test func(t *testing.T, launcher string)) {
	t.Run("agent", func(t *testing.T) { test(t, os.Args[0]) })
	t.Run("native", func(t *testing.T) { test(t, nativeLauncher(t)) })
}

// TestNative: the native launcher beside the agent binary is used once it has run the
// agent's `version` through a scoped start; a missing, non-executable or failing one
// leaves the agent binary as the launcher, with the reason.
func TestNative(t *testing.T) {
	if testenv.NativeLauncherName != NativeName {
		t.Fatalf("testenv builds %q, the agent looks for %q", testenv.NativeLauncherName, NativeName)
	}
	requireScopes(t)
	scope, err := NewScopeRuleset(ScopeAll, nil)
	must(t, err)
	defer scope.Close()
	built := nativeLauncher(t)
	src, err := os.ReadFile(built)
	must(t, err)
	// The stand-in agent answers `version` as cws-agent does (exit 0).
	agentOK := []byte("#!/bin/sh\n[ \"$1\" = version ] && echo cws-agent test\n")
	for _, tc := range []struct {
		name     string
		launcher []byte // nil: none installed
		mode     os.FileMode
		native   bool
	}{
		{"installed", src, 0o755, true},
		{"none", nil, 0, false},
		{"not executable", src, 0o644, false},
		{"fails its start", []byte("#!/bin/sh\nexit 3\n"), 0o755, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			agent := filepath.Join(dir, "cws-agent")
			must(t, os.WriteFile(agent, agentOK, 0o755))
			if tc.launcher != nil {
				must(t, os.WriteFile(filepath.Join(dir, NativeName), tc.launcher, tc.mode))
			}
			got, err := Native(agent, scope)
			want := agent
			if tc.native {
				want = filepath.Join(dir, NativeName)
			}
			if got != want || (err == nil) != tc.native {
				t.Errorf("Native = %q, %v; want %q (native %v)", got, err, want, tc.native)
			}
			if tc.launcher == nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("no launcher installed: %v, want a not-exist error", err)
			}
		})
	}
}
