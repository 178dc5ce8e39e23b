package server

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
)

// usage reports the sandbox's cgroup counters and, when asked, sums the workspace's
// regular files (as lstat sees them: links are not followed) without reading them,
// up to agent.MaxUsageEntries entries.
func (s *Server) usage(ctx context.Context, raw json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.UsageArgs
	_ = json.Unmarshal(raw, &a)
	var u agent.DiskUsage
	readCgroup(&u)
	if !a.Disk {
		return u, nil
	}
	err := fs.WalkDir(s.ws.Root().FS(), ".", func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: skip
		}
		if u.Files++; u.Files >= agent.MaxUsageEntries {
			u.Partial = true
			return fs.SkipAll
		}
		if u.Files%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				u.Bytes += fi.Size()
			}
		}
		return nil
	})
	return u, err
}

// readCgroup fills u from the cgroup the agent runs in, as the container runtime
// mounts it at /sys/fs/cgroup: cgroup v2 (one tree) or v1 (a tree per controller).
func readCgroup(u *agent.DiskUsage) {
	num := func(path string) (int64, bool) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n, err == nil
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/cpu.stat"); err == nil { // v2
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				u.CPUSeconds, u.Cgroup = float64(n)/1e6, true
			}
		}
		u.MemoryBytes, _ = num("/sys/fs/cgroup/memory.current")
		u.MemoryPeakBytes, _ = num("/sys/fs/cgroup/memory.peak")
		if p, ok := num("/sys/fs/cgroup/pids.current"); ok {
			u.Processes = int(p)
		}
		return
	}
	if n, ok := num("/sys/fs/cgroup/cpuacct/cpuacct.usage"); ok { // v1
		u.CPUSeconds, u.Cgroup = float64(n)/1e9, true
	}
	u.MemoryBytes, _ = num("/sys/fs/cgroup/memory/memory.usage_in_bytes")
	u.MemoryPeakBytes, _ = num("/sys/fs/cgroup/memory/memory.max_usage_in_bytes")
	if p, ok := num("/sys/fs/cgroup/pids/pids.current"); ok {
		u.Processes = int(p)
	}
}
