package ident

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestSameUID: an agent that is the tool user itself (same-uid mode, no capability
// needed) takes no tool identity: UseToolFS of its own ids succeeds and changes
// nothing, Credential is nil (so no setgroups between fork and exec), Private runs
// its function as it is, and processes start with the agent's own ids.
func TestSameUID(t *testing.T) {
	self := Tool{UID: os.Geteuid(), GID: os.Getegid()}
	if !Same(self) || Same(Tool{UID: self.UID + 1, GID: self.GID}) || Same(Tool{UID: self.UID, GID: self.GID + 1}) {
		t.Fatalf("Same is wrong about %+v", self)
	}
	if err := UseToolFS(self); err != nil {
		t.Fatalf("UseToolFS(own ids %+v): %v", self, err)
	}
	if cur, ok := Current(); ok {
		t.Errorf("Current() = %+v after UseToolFS of the process's own ids, want none", cur)
	}
	if c := Credential(); c != nil {
		t.Errorf("Credential() = %+v, want nil", c)
	}
	// Even a stored identity that is the process's own gives no Credential.
	tool.Store(&self)
	c := Credential()
	tool.Store(nil)
	if c != nil {
		t.Errorf("Credential() of the process's own ids = %+v, want nil", c)
	}

	dir := t.TempDir()
	ran := false
	if err := Private(func() error {
		ran = true
		return os.WriteFile(filepath.Join(dir, "private"), nil, 0o600)
	}); err != nil || !ran {
		t.Fatalf("Private: ran %v, %v", ran, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "private"), &st); err != nil {
		t.Fatal(err)
	}
	if int(st.Uid) != self.UID || int(st.Gid) != self.GID {
		t.Errorf("a private file is owned by %d:%d, want %d:%d", st.Uid, st.Gid, self.UID, self.GID)
	}

	cmd := exec.Command("/bin/sh", "-c", "id -u; id -g")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: Credential()}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("start with Credential(): %v", err)
	}
	want := strconv.Itoa(self.UID) + "\n" + strconv.Itoa(self.GID)
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("the started process is %q, want %q", got, want)
	}
}
