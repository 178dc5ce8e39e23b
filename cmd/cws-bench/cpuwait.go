package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cwsdev/cws/internal/bench"
)

// cpuWait records what the CPU did to a measurement besides the code measured: how
// long the machine's runnable tasks waited for a core (the kernel's pressure stall
// information, /proc/pressure/cpu "some"), and how often the sandboxes' containers
// were throttled by their CPU quota (the cgroup's cpu.stat; 1 CPU by default). On this
// shared 2-core machine they are what moves runCommand and gitStatus from run to run:
// every hop of a call (cws, the agent, the launcher, the program) is a wake-up that
// waits its turn for a core. Figures only; a reading the kernel lacks is left out.
type cpuWait struct {
	speed     time.Duration // calibrate's figure at the start
	start     time.Time
	stall     time.Duration // /proc/pressure/cpu some total at the start
	stallOK   bool
	throttled map[string]throttle // by container ID, at the start
}

type throttle struct {
	periods, throttled int64
	time               time.Duration
}

// watchCPU starts recording, for the containers of sandboxes (Docker container IDs).
func watchCPU(sandboxes ...string) *cpuWait {
	speed := calibrate()
	w := &cpuWait{speed: speed, start: time.Now(), throttled: map[string]throttle{}}
	w.stall, w.stallOK = cpuStall()
	for _, id := range sandboxes {
		if t, ok := cgroupThrottle(id); ok {
			w.throttled[id] = t
		}
	}
	return w
}

// note says what happened since watchCPU, e.g. "CPU pressure 41 % (tasks waited for
// a core 41 % of the time); containers throttled in 0 of 1,204 quota periods".
func (w *cpuWait) note() string {
	var parts []string
	wall := time.Since(w.start)
	if s, ok := cpuStall(); ok && w.stallOK && wall > 0 {
		parts = append(parts, fmt.Sprintf("CPU pressure %.0f %% (runnable tasks waited for a core that share of the time)", 100*float64(s-w.stall)/float64(wall)))
	}
	var sum throttle
	for id, t0 := range w.throttled {
		if t, ok := cgroupThrottle(id); ok {
			sum.periods += t.periods - t0.periods
			sum.throttled += t.throttled - t0.throttled
			sum.time += t.time - t0.time
		}
	}
	if len(w.throttled) > 0 {
		parts = append(parts, fmt.Sprintf("sandboxes throttled by their CPU quota in %d of %d periods (%s)", sum.throttled, sum.periods, sum.time.Round(time.Millisecond)))
	}
	if w.speed > 0 {
		parts = append(parts, fmt.Sprintf("calibration %s (a fixed CPU task just before: the machine's own speed then)", bench.Format(w.speed)))
	}
	return strings.Join(parts, "; ")
}

// calibrate times a fixed piece of work, the same in every run (map updates that miss
// the caches, and SHA-256), and returns the fastest of three: on a shared virtual
// machine it moves with what the neighbours do to the caches and memory, which no
// stall or steal counter shows, and so says how fast the machine itself was when a
// figure was taken.
func calibrate() time.Duration {
	const keys = 1 << 18
	buf := make([]byte, 2<<20)
	best := time.Duration(0)
	for range 3 {
		m := make(map[uint32]uint32, keys)
		x := uint32(2463534242)
		start := time.Now()
		for range 400_000 {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			m[x%keys] += x
		}
		sum := sha256.Sum256(buf)
		buf[0] = sum[0]
		if d := time.Since(start); best == 0 || d < best {
			best = d
		}
	}
	return best
}

// cpuStall is the total time some runnable task waited for a CPU, since boot.
func cpuStall() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return 0, false
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	for f := range strings.FieldsSeq(string(line)) {
		if v, ok := strings.CutPrefix(f, "total="); ok {
			us, err := strconv.ParseInt(v, 10, 64)
			return time.Duration(us) * time.Microsecond, err == nil
		}
	}
	return 0, false
}

// cgroupThrottle reads the CPU quota's throttling of Docker container id, from cgroup
// v1 (cgroupfs driver) or v2 (systemd or cgroupfs driver).
func cgroupThrottle(id string) (throttle, bool) {
	for _, dir := range []string{
		"/sys/fs/cgroup/cpu/docker/" + id,
		"/sys/fs/cgroup/cpu,cpuacct/docker/" + id,
		"/sys/fs/cgroup/system.slice/docker-" + id + ".scope",
		"/sys/fs/cgroup/docker/" + id,
	} {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
		if err != nil {
			continue
		}
		var t throttle
		for line := range strings.SplitSeq(string(b), "\n") {
			k, v, _ := strings.Cut(line, " ")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "nr_periods":
				t.periods = n
			case "nr_throttled":
				t.throttled = n
			case "throttled_time": // v1: ns
				t.time = time.Duration(n)
			case "throttled_usec": // v2
				t.time = time.Duration(n) * time.Microsecond
			}
		}
		return t, true
	}
	return throttle{}, false
}

// interleaveWatched is interleave with each row's note saying what the CPU did to the
// run (cpuWait), for the containers of sandboxes.
func interleaveWatched(ctx context.Context, e *env, section string, warm, n int, anchors, rows []*row, sandboxes ...string) ([]bench.Row, error) {
	w := watchCPU(sandboxes...)
	out, err := interleave(ctx, e, section, warm, n, anchors, rows)
	if note := w.note(); note != "" {
		e.logf("%s: %s", section, note)
		for i := range out {
			out[i].Note = strings.TrimPrefix(out[i].Note+"; "+note, "; ")
		}
	}
	return out, err
}
