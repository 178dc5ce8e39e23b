package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/version"
)

// BenchmarkReadTransports reads 4 KiB through agent.Client from one container, over
// the exec stream and over the socket, and reports p50 and p99 beside ns/op. Run with
// -count=N: the two alternate, so the machine's load weighs on both alike.
//
//	CI=true go test ./sandbox/docker -run '^$' -bench ReadTransports -count 3
func BenchmarkReadTransports(b *testing.B) {
	cli := requireDocker(b)
	requireImage(b, cli, version.WorkspaceImage)
	d := newDriverWith(b, Config{Transport: TransportSocket})
	info := create(b, d, cli, sandbox.Spec{Session: uniq("bench"), Tenant: uniq("tenant"), Image: version.WorkspaceImage})
	content := make([]byte, 4<<10)
	_, _ = rand.Read(content)
	drivers := []struct {
		name string
		d    *Driver
	}{
		{"exec", newDriverWith(b, Config{Transport: TransportExec})},
		{"socket", d},
	}
	for _, dr := range drivers {
		b.Run(dr.name, func(b *testing.B) {
			c := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) { return dr.d.Attach(ctx, info.ID) }, version.Version, nil)
			defer c.Close()
			ctx := context.Background()
			e := &e2eEnv{d: dr.d, id: info.ID, c: c}
			e.ready(b, c)
			if _, err := c.WriteFile(ctx, agent.WriteArgs{Path: "f4k", Create: true}, content); err != nil {
				b.Fatal(err)
			}
			for range 100 { // warm-up
				if _, _, err := c.ReadFile(ctx, agent.ReadArgs{Path: "f4k"}); err != nil {
					b.Fatal(err)
				}
			}
			samples := make([]time.Duration, 0, b.N)
			self0, dockerd0 := cpuTime(os.Getpid()), cpuTime(pidOf("dockerd"))
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				if _, _, err := c.ReadFile(ctx, agent.ReadArgs{Path: "f4k"}); err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Since(t0))
			}
			b.StopTimer()
			perOp := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
			b.ReportMetric(perOp(cpuTime(os.Getpid())-self0), "host-cpu-µs/op")
			b.ReportMetric(perOp(cpuTime(pidOf("dockerd"))-dockerd0), "dockerd-cpu-µs/op")
			slices.Sort(samples)
			b.ReportMetric(float64(samples[len(samples)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(samples[len(samples)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// cpuTime is the user+system CPU time of process pid so far (0 if unknown), from
// /proc/<pid>/stat.
func cpuTime(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) start at the last ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// pidOf is the pid of the first process whose command is name, or 0.
func pidOf(name string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if comm, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && strings.TrimSpace(string(comm)) == name {
			return pid
		}
	}
	return 0
}
