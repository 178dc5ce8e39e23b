package server

import (
	"os"
	"runtime"
	"sync/atomic"
	"testing"
)

// A thread that can't take cws's identity back ends with the goroutine that ran the
// call, while the caller still gets its answer, on a thread of its own identity; a
// panic of the call reaches the caller once the identity is back; and the next call
// switches and comes back as usual.
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
	saved := putBack
	t.Cleanup(func() { putBack = saved })
	putBack = func() bool { restoreIdentity(); return false } // as if it failed
	var during int
	if !asIdentity(65534, 65534, func() { during = currentFSUID() }) {
		t.Fatal("asIdentity did not run fn, or did not answer")
	}
	if during != 65534 {
		t.Fatalf("fsuid %d during the call, want 65534", during)
	}
	if cur := currentFSUID(); cur != identity.uid {
		t.Fatalf("the caller's thread has fsuid %d after the call, want cws's %d", cur, identity.uid)
	}

	putBack = saved
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("recovered %v, want the call's panic", p)
			}
			if cur := currentFSUID(); cur != identity.uid {
				t.Errorf("fsuid %d after a panicking call, want %d", cur, identity.uid)
			}
		}()
		asIdentity(65534, 65534, func() { panic("boom") })
		t.Error("a panicking call returned")
	}()
	var ran atomic.Bool
	if !asIdentity(65534, 65534, func() { ran.Store(currentFSUID() == 65534) }) || !ran.Load() {
		t.Fatal("the next call did not run as 65534")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if cur := currentFSUID(); cur != identity.uid {
		t.Fatalf("fsuid %d after the calls, want %d", cur, identity.uid)
	}
}
