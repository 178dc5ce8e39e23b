// Package cpulimit reads the CPU limit of the cgroup the agent runs in.
package cpulimit

import (
	"os"
	"strconv"
	"strings"
)

// CPUs is the container's CPU limit in whole CPUs, rounded up; 0 when there is none
// or it cannot be read. It reads cgroup v2's cpu.max, else v1's CFS quota and period.
func CPUs() int {
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
