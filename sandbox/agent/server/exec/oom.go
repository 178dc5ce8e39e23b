package exec

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
)

// The container's memory cgroup, as seen from inside it (cgroup v2, then v1).
var (
	oomEventFiles  = []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"}
	memLimitFiles  = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}
	noMemoryLimit  = int64(1) << 62 // cgroup v1 reports "no limit" as a huge number
	oomKillCounter = "oom_kill"
)

// oomKills returns how many processes the kernel's OOM killer has killed in this
// container's memory cgroup (the oom_kill line of memory.events, or of
// memory.oom_control on cgroup v1); -1 when it cannot tell. It runs before every
// command, so the file is found and opened once and read again in place (pread).
func oomKills() int64 {
	oomFile.mu.Lock()
	if oomFile.f == nil { // not found yet: looked for again by the next command
		for _, name := range oomEventFiles {
			if f, err := os.Open(name); err == nil {
				oomFile.f = f
				break
			}
		}
	}
	f := oomFile.f
	oomFile.mu.Unlock()
	if f == nil {
		return -1
	}
	var buf [4096]byte
	n, err := f.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		oomFile.mu.Lock()
		if oomFile.f == f { // gone (the cgroup remounted): looked for again next time
			f.Close()
			oomFile.f = nil
		}
		oomFile.mu.Unlock()
		return -1
	}
	for line := range bytes.SplitSeq(buf[:n], []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(" "))
		if ok && string(k) == oomKillCounter {
			if n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// oomFile is the first of oomEventFiles that opened (ReadAt is safe for concurrent
// use: each is a pread of its own).
var oomFile struct {
	mu sync.Mutex
	f  *os.File
}

// memoryLimit returns the container's memory limit in bytes, or 0 when there is none
// or it cannot tell.
func memoryLimit() int64 {
	for _, f := range memLimitFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n >= noMemoryLimit {
			return 0 // "max", or v1's "unlimited"
		}
		return n
	}
	return 0
}

// oomKilled reports whether a command that ended with exit/signal was killed by the
// memory limit: the OOM killer struck while it ran, and it died of SIGKILL (or its
// shell reported a child's SIGKILL as 137).
func oomKilled(before int64, exitCode int, signal string) bool {
	if before < 0 || (signal != "killed" && exitCode != 137) {
		return false
	}
	return oomKills() > before
}
