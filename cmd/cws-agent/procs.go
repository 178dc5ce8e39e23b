package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// The Go runtime sizes GOMAXPROCS from the container's CPU limit, but never below 2.
// A workspace is usually limited to one CPU, and an agent with two Ps under a one-CPU
// quota hands every call between threads that the quota then throttles: with 50 busy
// sessions, GOMAXPROCS 1 cuts the agent's CPU per call by about a fifth. So the agent
// follows the limit down to 1, and re-reads it, because `docker update` changes it on a
// running container (a warm-pool container takes its tenant's limits at hand-out).
// GOMAXPROCS in the environment, set by an operator, wins.

// procsEvery is how often the CPU limit is read again.
const procsEvery = 10 * time.Second

// followCPULimit sets GOMAXPROCS from the cgroup's CPU limit now and every procsEvery.
func followCPULimit() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	set := func() {
		if n := cpuLimit(); n > 0 {
			runtime.GOMAXPROCS(min(n, runtime.NumCPU()))
		}
	}
	set()
	go func() {
		for range time.Tick(procsEvery) {
			set()
		}
	}()
}

// cpuLimit is the container's CPU limit in whole CPUs, rounded up; 0 when there is none
// or it cannot be read. It reads cgroup v2's cpu.max, else v1's CFS quota and period.
func cpuLimit() int {
	if b, err := os.ReadFile("/sys/fs/cgroup/cpu.max"); err == nil {
		f := strings.Fields(string(b))
		if len(f) == 2 && f[0] != "max" {
			return quotaCPUs(f[0], f[1])
		}
		return 0
	}
	for _, dir := range []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"} {
		q, err1 := os.ReadFile(dir + "/cpu.cfs_quota_us")
		p, err2 := os.ReadFile(dir + "/cpu.cfs_period_us")
		if err1 == nil && err2 == nil {
			return quotaCPUs(strings.TrimSpace(string(q)), strings.TrimSpace(string(p)))
		}
	}
	return 0
}

// quotaCPUs is ceil(quota/period), or 0 for no quota (-1) or numbers it cannot read.
func quotaCPUs(quota, period string) int {
	q, err1 := strconv.ParseInt(quota, 10, 64)
	p, err2 := strconv.ParseInt(period, 10, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0
	}
	return int((q + p - 1) / p)
}
