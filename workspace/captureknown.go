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

// maxKnown bounds the sandboxes whose last capture this replica remembers.
const maxKnown = 64

// knownSums is, by sandbox id, the contents its last capture held.
type knownSums struct {
	mu sync.Mutex
	m  map[string]knownSet
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
	if _, ok := k.m[sandbox]; !ok && len(k.m) >= maxKnown {
		oldest, at := "", time.Time{}
		for id, s := range k.m {
			if oldest == "" || s.at.Before(at) {
				oldest, at = id, s.at
			}
		}
		delete(k.m, oldest)
	}
	k.m[sandbox] = knownSet{sums, time.Now()}
}

func (k *knownSums) forget(sandbox string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, sandbox)
}
