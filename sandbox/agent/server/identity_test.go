package server

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
)

// A thread that can't take cws's identity back stops the process (exit status 70),
// before anything else of cws runs: here in a child process of the test binary, whose
// restore is made to fail. In this process, a call switches and comes back as usual.
func TestAsIdentityRestoreFails(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the identity switch needs root; CI runs as root")
		}
		t.Skip("the identity switch needs root")
	}
	if err := identityCheck(); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("CWS_TEST_RESTORE_FAILS") == "1" {
		putBack = func() bool { restoreIdentity(); return false } // as if it failed
		asIdentity(65534, 65534, func() {})
		os.Stdout.WriteString("went on after a failed restore\n")
		os.Exit(0)
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestAsIdentityRestoreFails$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), "CWS_TEST_RESTORE_FAILS=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 70 || strings.Contains(string(out), "went on") {
		t.Fatalf("a failed restore: %v, output %q; want exit status 70 and nothing after", err, out)
	}
	if !strings.Contains(string(out), "could not take cws's own identity back") {
		t.Errorf("the log does not say why it stopped: %q", out)
	}

	var during atomic.Int64
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if !asIdentity(65534, 65534, func() { during.Store(int64(currentFSUID())) }) || during.Load() != 65534 {
		t.Fatalf("fsuid %d during the call, want 65534", during.Load())
	}
	if cur := currentFSUID(); cur != identity.uid {
		t.Fatalf("fsuid %d after the call, want cws's %d", cur, identity.uid)
	}
}
