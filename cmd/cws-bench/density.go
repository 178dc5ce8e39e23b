package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/sandbox/agent"
)

func init() {
	sections = append(sections, section{
		Name:  "density",
		Order: 60,
		Doc:   "memory of an idle session: the agent's processes, the container, its containerd-shim; how many idle sessions this machine holds",
		Run:   benchDensity,
	})
	goals = append(goals, goal{Order: 50, Figure: "agent idle RSS (init + serve)", Row: "agent idle RSS", MaxBytes: 15 << 20})
}

// idleWait is how long a session is left alone before it is measured: longer than the
// agent's ReleaseIdle (2 s), so that it has given back what a burst left.
const idleWait = 5 * time.Second

// The figures are read from the host's /proc (the bench runs beside the engine): RSS
// counts the agent binary's pages, which every container shares from one file; private
// memory is what one more session costs. The container's own figure is its cgroup's,
// without the page cache, as docker stats shows it.
func benchDensity(ctx context.Context, e *env) ([]bench.Row, error) {
	b, err := e.newBox(ctx)
	if err != nil {
		return nil, err
	}
	defer e.remove(ctx, b)
	e.logf("idle session: waiting %s…", idleWait)
	time.Sleep(idleWait)
	rows, err := densityRows(ctx, b.ID, "idle session", true)
	if err != nil {
		return rows, err
	}

	// A burst: a 2,000-file upload and searches, then idle again.
	src := filepath.Join(runtime.GOROOT(), "src")
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarDir(pw, src, smallFiles)) }()
	if _, err := b.Client.TarIn(ctx, agent.TarInArgs{Path: "burst"}, pr); err != nil {
		return rows, fmt.Errorf("upload: %w", err)
	}
	for range 10 {
		if _, err := b.Client.Search(ctx, agent.SearchArgs{Query: "func", MaxResults: 5000}); err != nil {
			return rows, err
		}
	}
	e.logf("after a burst (upload, 10 searches): waiting %s…", idleWait)
	time.Sleep(idleWait)
	more, err := densityRows(ctx, b.ID, "idle after a burst", false)
	return append(rows, more...), err
}

// densityRows measures the container id: one row per agent process, its shim, the
// container, and with fits, the sessions the host's memory holds at that cost.
func densityRows(ctx context.Context, id, when string, fits bool) ([]bench.Row, error) {
	out, err := exec.CommandContext(ctx, "docker", "inspect", "-f", "{{.Id}}", id).Output()
	if err != nil {
		return nil, fmt.Errorf("docker inspect: %w", err)
	}
	full := strings.TrimSpace(string(out))
	out, err = exec.CommandContext(ctx, "docker", "top", id, "-eo", "pid,args").Output()
	if err != nil {
		return nil, fmt.Errorf("docker top: %w", err)
	}
	var rows []bench.Row
	var private, agentRSS int64
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n")[1:] {
		pid, args, _ := strings.Cut(strings.TrimSpace(line), " ")
		if !strings.Contains(args, "cws-agent") {
			continue
		}
		m, err := smaps(pid)
		if err != nil {
			rows = append(rows, bench.Row{Name: when + ": " + strings.TrimSpace(args), Note: err.Error()})
			continue
		}
		private += m.private
		if !strings.Contains(args, " attach") { // the exec stream's bridge; none on the socket path
			agentRSS += m.rss
		}
		rows = append(rows, bench.Row{Name: when + ": " + strings.TrimSpace(args), Note: m.String()})
	}
	if fits && agentRSS > 0 {
		rows = append(rows, bench.Row{Name: "agent idle RSS", N: 1, Bytes: agentRSS, Note: "init + serve, idle, from the host's /proc"})
	}
	usage := "n/a"
	if out, err := exec.CommandContext(ctx, "docker", "stats", "--no-stream", "--format", "{{.MemUsage}}", id).Output(); err == nil {
		usage, _, _ = strings.Cut(strings.TrimSpace(string(out)), " /")
	}
	note := fmt.Sprintf("%s (agent processes: %s private)", usage, mib(private))
	if !fits {
		note += "; with the page cache of the files written, which the kernel reclaims"
	}
	rows = append(rows, bench.Row{Name: when + ": container (docker stats)", Note: note})
	shim, err := shimOf(full)
	if err != nil {
		rows = append(rows, bench.Row{Name: when + ": containerd-shim", Note: err.Error()})
		return rows, nil
	}
	m, err := smaps(shim)
	if err != nil {
		return rows, nil
	}
	rows = append(rows, bench.Row{Name: when + ": containerd-shim", Note: m.String()})
	if total := memTotal(); total > 0 && fits {
		per := parseMiB(usage) + m.private
		if per > 0 {
			rows = append(rows, bench.Row{Name: when + ": sessions this machine holds",
				Note: fmt.Sprintf("%d (%s ÷ (container %s + shim %s); dockerd's share not counted)", total/per, mib(total), usage, mib(m.private))})
		}
	}
	return rows, nil
}

// procMem is a process's memory from /proc/<pid>/smaps_rollup, in bytes.
type procMem struct{ rss, pss, private int64 }

func (m procMem) String() string {
	return fmt.Sprintf("RSS %s, PSS %s, private %s", mib(m.rss), mib(m.pss), mib(m.private))
}

func smaps(pid string) (procMem, error) {
	data, err := os.ReadFile("/proc/" + pid + "/smaps_rollup")
	if err != nil {
		return procMem{}, fmt.Errorf("not readable from this host (%v)", err)
	}
	var m procMem
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Rss:":
			m.rss = kb << 10
		case "Pss:":
			m.pss = kb << 10
		case "Private_Clean:", "Private_Dirty:":
			m.private += kb << 10
		}
	}
	return m, nil
}

// shimOf finds the containerd-shim serving container full (by its -id argument).
func shimOf(full string) (string, error) {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		cmdline, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmdline, []byte("containerd-shim")) {
			continue
		}
		if bytes.Contains(cmdline, []byte("\x00-id\x00"+full+"\x00")) {
			return d.Name(), nil
		}
	}
	return "", fmt.Errorf("not found in this host's /proc")
}

func memTotal() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for l := range strings.SplitSeq(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// parseMiB reads docker stats' "4.7MiB" (or KiB, GiB) as bytes; 0 if it cannot.
func parseMiB(s string) int64 {
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0
			}
			return int64(f * u.mult)
		}
	}
	return 0
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
