package server

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"sync"
	"time"
)

// An idle agent should cost little memory: a session sits idle most of its life, and a
// machine holds as many sessions as their memory allows. After a burst of calls (a
// search, an upload) the Go heap keeps its freed spans until the next collection, which
// an idle agent does not run for minutes. So when the last call of a burst has ended
// and nothing else has started for a while, the agent collects and gives the freed
// memory back to the OS (freeMemory): once per burst, never while calls run.

// defaultReleaseIdle is Config.ReleaseIdle's zero value.
const defaultReleaseIdle = 2 * time.Second

// idleRelease counts the calls in flight and returns memory once they have all been
// over for after.
type idleRelease struct {
	after   time.Duration // <= 0: never
	release func()        // freeMemory; tests count calls instead

	mu     sync.Mutex
	active int
	gen    uint64 // bumped by every call, so a stale timer does nothing
	armed  uint64 // gen when the timer was last set
	timer  *time.Timer
}

func newIdleRelease(after time.Duration) *idleRelease {
	if after == 0 {
		after = defaultReleaseIdle
	}
	return &idleRelease{after: after, release: freeMemory}
}

// smallHeap is the heap below which freeMemory does nothing: the first collection
// touches about 1 MiB of the runtime's own metadata, more than it would give back.
const smallHeap = 2 << 20

// heapSamples are the runtime/metrics of the heap's memory not yet given back.
var heapSamples = []metrics.Sample{
	{Name: "/memory/classes/heap/objects:bytes"},
	{Name: "/memory/classes/heap/unused:bytes"},
	{Name: "/memory/classes/heap/free:bytes"},
}

// freeMemory collects twice, so that what sync.Pools held (the search buffers) is
// freed too, and returns the freed memory to the OS. A small heap is left alone.
func freeMemory() {
	samples := slices.Clone(heapSamples)
	metrics.Read(samples)
	var held uint64
	for _, s := range samples {
		if s.Value.Kind() == metrics.KindUint64 {
			held += s.Value.Uint64()
		}
	}
	if held < smallHeap {
		return
	}
	runtime.GC()
	debug.FreeOSMemory()
}

// busy marks a call as running; the caller calls the returned func when it ends.
func (r *idleRelease) busy() (done func()) {
	if r.after < 0 {
		return func() {}
	}
	r.mu.Lock()
	r.active++
	r.gen++
	r.mu.Unlock()
	return r.end
}

func (r *idleRelease) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.active--
	if r.active > 0 {
		return
	}
	r.armed = r.gen
	if r.timer == nil {
		r.timer = time.AfterFunc(r.after, r.fire)
	} else {
		r.timer.Reset(r.after)
	}
}

// fire releases memory if no call has started since the timer was set.
func (r *idleRelease) fire() {
	r.mu.Lock()
	idle := r.active == 0 && r.gen == r.armed
	r.mu.Unlock()
	if idle {
		r.release()
	}
}
