package server

import (
	"os"
	"runtime"
	"sync/atomic"
	"testing"
)

// A thread that can't take cws's identity back ends with the goroutine it served:
// nothing after asIdentity runs there (its deferred calls do), and the next call, on
// another thread, switches and comes back as usual.
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
	var after, deferred atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer deferred.Store(true)
		asIdentity(65534, 65534, func() {})
		after.Store(true)
	}()
	<-done
	if after.Load() {
		t.Fatal("the goroutine went on after its thread could not take cws's identity back")
	}
	if !deferred.Load() {
		t.Fatal("the goroutine's deferred calls did not run")
	}

	putBack = saved
	var during int
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if !asIdentity(65534, 65534, func() { during = currentFSUID() }) {
		t.Fatal("asIdentity did not run fn")
	}
	if during != 65534 || currentFSUID() != identity.uid {
		t.Fatalf("fsuid %d during the call (want 65534), %d after (want %d)", during, currentFSUID(), identity.uid)
	}
}
