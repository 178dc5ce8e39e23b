package workspace

import (
	"sync"
	"time"
)

// A snapshot of a workspace that barely changed should cost what changed, not the
// whole tree: the agent remembers the SHA-256 of every file it sent whole, and the
// next capture sends an unchanged file as a reference to its contents
// (agent.TarOutArgs.Refs). cws lets a capture name only contents the same sandbox's
// last capture on this replica sent (knownSums): a sandbox can't claim contents it
// never had. A reference the store can't vouch for (snapshot.ErrStaleRef) makes the
// capture start again, whole.

// maxKnown bounds the sandboxes whose last capture this replica remembers, and
// maxKnownSums their contents all told (about 100 bytes each: 50 MB): the oldest go
// first, and a capture of more is not remembered (its next capture is whole).
const (
	maxKnown     = 64
	maxKnownSums = 512 << 10
)

// knownSums is, by sandbox id, the contents its last capture held.
type knownSums struct {
	mu    sync.Mutex
	m     map[string]knownSet
	total int // sums held, all sandboxes
}

type knownSet struct {
	sums map[string]bool
	at   time.Time
}

func (k *knownSums) get(sandbox string) map[string]bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.m[sandbox].sums
}

func (k *knownSums) put(sandbox string, sums map[string]bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]knownSet{}
	}
	k.dropLocked(sandbox)
	if len(sums) > maxKnownSums {
		return
	}
	for len(k.m) > 0 && (len(k.m) >= maxKnown || k.total+len(sums) > maxKnownSums) {
		oldest, at := "", time.Time{}
		for id, s := range k.m {
			if oldest == "" || s.at.Before(at) {
				oldest, at = id, s.at
			}
		}
		k.dropLocked(oldest)
	}
	k.m[sandbox] = knownSet{sums, time.Now()}
	k.total += len(sums)
}

func (k *knownSums) dropLocked(sandbox string) {
	if s, ok := k.m[sandbox]; ok {
		k.total -= len(s.sums)
		delete(k.m, sandbox)
	}
}

func (k *knownSums) forget(sandbox string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dropLocked(sandbox)
}
