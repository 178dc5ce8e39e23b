package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestResetStateModes: modes a tool process took away from the agent's state (Landlock
// can't keep it from chmod) are given back when serve starts.
func TestResetStateModes(t *testing.T) {
	old := agentStateDir
	agentStateDir = t.TempDir()
	t.Cleanup(func() { agentStateDir = old })
	procs := filepath.Join(agentStateDir, "procs")
	rec := filepath.Join(procs, "p1-abcd.json")
	if err := os.MkdirAll(procs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rec, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(rec, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(procs, 0); err != nil {
		t.Fatal(err)
	}
	resetStateModes(slog.New(slog.DiscardHandler))
	for p, want := range map[string]os.FileMode{procs: 0o700, rec: 0o600} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, fi.Mode().Perm(), err, want)
		}
	}
}
