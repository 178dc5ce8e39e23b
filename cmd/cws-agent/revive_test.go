package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// revive finds the agent's processes by their command line and uid: a process that
// runs `.../cws-agent serve` as this uid is found, one of another command is not.
func TestAgentProcs(t *testing.T) {
	uid, gid, err := procIDs(os.Getpid())
	if err != nil || uid != os.Getuid() || gid != os.Getgid() {
		t.Fatalf("procIDs(self) = %d, %d, %v; want %d, %d", uid, gid, err, os.Getuid(), os.Getgid())
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "cws-agent")
	if err := os.Symlink(sh, fake); err != nil {
		t.Fatal(err)
	}
	// `cws-agent serve` is sh running the script "serve", which sleeps.
	if err := os.WriteFile(filepath.Join(dir, "serve"), []byte("sleep 30; true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(fake, "serve")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if got := agentProcs(uid, "serve"); !slices.Contains(got, cmd.Process.Pid) {
		t.Errorf("agentProcs(%d, serve) = %v, want it to hold %d", uid, got, cmd.Process.Pid)
	}
	if got := agentProcs(uid, "attach"); slices.Contains(got, cmd.Process.Pid) {
		t.Errorf("agentProcs(%d, attach) = %v, holds the serve %d", uid, got, cmd.Process.Pid)
	}
	if got := agentProcs(uid+1, "serve"); slices.Contains(got, cmd.Process.Pid) {
		t.Errorf("agentProcs of another uid holds %d", cmd.Process.Pid)
	}
}
