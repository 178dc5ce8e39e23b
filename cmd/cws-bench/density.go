package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/sandbox/agent"
)

func init() {
	sections = append(sections, section{
		Name:  "density",
		Order: 95,
		Doc:   "memory of an idle session: the agent's RSS and the container's, and how many idle sessions fit",
		Run:   benchDensity,
	})
	goals = append(goals, goal{Figure: "agent idle RSS (init + serve)", Row: "agent idle RSS", MaxBytes: 15 << 20})
}

// idleWait is how long the session sits idle before it is measured.
const idleWait = 5 * time.Second

// benchDensity creates a session, makes a few calls, leaves it idle, then reads the
// agent processes' VmRSS from the host's /proc and the container's memory from its
// cgroup. It needs cws-bench to run on the engine's host (as root).
func benchDensity(ctx context.Context, e *env) ([]bench.Row, error) {
	b, err := e.newBox(ctx)
	if err != nil {
		return nil, err
	}
	defer e.remove(ctx, b)
	for range 20 { // a few calls, as an agent's first moments would make
		if _, err := b.Client.List(ctx, agent.ListArgs{Path: "."}); err != nil {
			return nil, err
		}
	}
	e.logf("idle for %s…", idleWait)
	select {
	case <-time.After(idleWait):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out, err := exec.CommandContext(ctx, "docker", "inspect", "-f", "{{.State.Pid}}", b.ID).Output()
	if err != nil {
		return nil, fmt.Errorf("docker inspect: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return nil, fmt.Errorf("container pid %q: %w", out, err)
	}
	var agentRSS int64
	var procs []string
	for _, p := range descendants(pid) {
		comm, rss, args := procInfo(p)
		if comm != "cws-agent" {
			continue
		}
		role := strings.Fields(args + " ?")[1]
		procs = append(procs, fmt.Sprintf("%s %.1f", role, float64(rss)/(1<<20)))
		if role != "attach" { // the exec stream's bridge is not there on the socket path
			agentRSS += rss
		}
	}
	if agentRSS == 0 {
		return nil, fmt.Errorf("no cws-agent process under pid %d (cws-bench must run on the engine's host)", pid)
	}
	rows := []bench.Row{{Name: "agent idle RSS", N: 1, Bytes: agentRSS,
		Note: fmt.Sprintf("VmRSS MiB: %s", strings.Join(procs, ", "))}}
	if mem, ok := cgroupMemory(b.ID); ok {
		total := memTotal()
		note := "the container's cgroup memory"
		if total > 0 {
			note += fmt.Sprintf("; %d such idle sessions fit in this machine's %.0f GiB", total/mem, float64(total)/(1<<30))
		}
		rows = append(rows, bench.Row{Name: "idle session memory", N: 1, Bytes: mem, Note: note})
	}
	return rows, nil
}

// descendants lists pid and every process below it.
func descendants(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", out[i]))
		for _, t := range tasks {
			b, _ := os.ReadFile(t)
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// procInfo reads a process's command name, resident set (bytes) and command line.
func procInfo(pid int) (comm string, rss int64, args string) {
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		switch k {
		case "Name":
			comm = strings.TrimSpace(v)
		case "VmRSS":
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			rss = kb << 10
		}
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return comm, rss, strings.Join(strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00"), " ")
}

// cgroupMemory reads the container's memory use from its cgroup (v2 or v1, cgroupfs or
// systemd driver), without the page cache of files it read where the cgroup says.
func cgroupMemory(id string) (int64, bool) {
	for _, p := range []string{
		"/sys/fs/cgroup/system.slice/docker-" + id + ".scope/memory.current",
		"/sys/fs/cgroup/docker/" + id + "/memory.current",
		"/sys/fs/cgroup/memory/docker/" + id + "/memory.usage_in_bytes",
		"/sys/fs/cgroup/memory/system.slice/docker-" + id + ".scope/memory.usage_in_bytes",
	} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 {
			continue
		}
		return n - inactiveFile(filepath.Dir(p)), true
	}
	return 0, false
}

// inactiveFile is the reclaimable page cache docker stats also leaves out.
func inactiveFile(dir string) int64 {
	b, _ := os.ReadFile(filepath.Join(dir, "memory.stat"))
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		if k == "inactive_file" || k == "total_inactive_file" {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// memTotal is the machine's memory in bytes, 0 if unknown.
func memTotal() int64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
