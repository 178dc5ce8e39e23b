package lsp

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestServerOutlivesThreads: a language server dies with the agent (Pdeathsig), which
// the kernel sends when the thread that forked it ends, not the process. The agent does
// end threads (a command under an exec policy is forked from a thread that is then
// discarded, package launch), so a server must outlive any of them.
func TestServerOutlivesThreads(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.write("a.fk", "hello world\n")
	f.hover("a.fk", 1, 1)
	before := f.m.Status()
	if len(before) != 1 {
		t.Fatalf("status %+v, want one server", before)
	}
	for range 20 {
		var wg sync.WaitGroup
		for range 2 * runtime.GOMAXPROCS(0) {
			wg.Go(func() {
				runtime.LockOSThread() // and end locked: the runtime ends the thread
				time.Sleep(time.Millisecond)
			})
		}
		wg.Wait()
	}
	time.Sleep(100 * time.Millisecond)
	if after := f.m.Status(); len(after) != 1 || after[0].PID != before[0].PID {
		t.Errorf("status after threads ended: %+v, want the server of pid %d still running", after, before[0].PID)
	}
}
