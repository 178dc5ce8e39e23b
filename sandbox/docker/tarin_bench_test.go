package docker

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/version"
)

// BenchmarkTarInContainer is the agent's side of an archived wake, in a real workspace
// container: the exact tar.in of a 17 MB / 2,000-file tree (a source tree and a .git of
// small objects) from this process over the socket transport, beside its anchor, GNU
// `tar -x -p` of the same archive in the same container, from a file of its volume
// into a new directory of it, timed inside. Each iteration restores into a new
// directory, both ways, alternating which goes first.
//
//	CI=true go test ./sandbox/docker -run '^$' -bench TarInContainer -benchtime 5x
//
// Beside the wall times it reports the CPU each side of the connection spent per
// restore: this process (the host end) and the container (the agent's end), and how
// long the container's CPU quota held it back; beside them the container's CPU for the
// anchor (tar, and the shell and exec around it). restore-ms is wall time on this side
// (the 17 MB cross the socket in it); tar-x-ms is timed inside the container. The
// restored trees stay until the container goes (about 40 MB an iteration).
func BenchmarkTarInContainer(b *testing.B) {
	cli := requireDocker(b)
	requireImage(b, cli, version.WorkspaceImage)
	d := newDriverWith(b, Config{Transport: cmp.Or(os.Getenv("CWS_BENCH_TRANSPORT"), TransportSocket)})
	info := create(b, d, cli, sandbox.Spec{Session: uniq("bench"), Tenant: uniq("tenant"), Image: version.WorkspaceImage})
	c := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) { return d.Attach(ctx, info.ID) }, version.Version, nil)
	defer c.Close()
	e := &e2eEnv{d: d, id: info.ID, c: c}
	e.ready(b, c)
	ctx := context.Background()

	// The tree goes in once as a plain tar; its exact capture is what a wake restores.
	if _, err := c.TarIn(ctx, agent.TarInArgs{Path: "seed"}, bytes.NewReader(plainTree(2000, 17<<20, 20))); err != nil {
		b.Fatal(err)
	}
	var archive bytes.Buffer
	if _, err := c.TarOut(ctx, agent.TarOutArgs{Path: "seed", Exact: true}, &archive); err != nil {
		b.Fatal(err)
	}
	// The anchor reads the same archive from a file of the volume.
	var holder bytes.Buffer
	tw := tar.NewWriter(&holder)
	if err := tw.WriteHeader(&tar.Header{Name: "anchor.tar", Mode: 0o644, Size: int64(archive.Len()), Typeflag: tar.TypeReg}); err != nil {
		b.Fatal(err)
	}
	_, _ = tw.Write(archive.Bytes())
	_ = tw.Close()
	if _, err := c.TarIn(ctx, agent.TarInArgs{Path: "."}, &holder); err != nil {
		b.Fatal(err)
	}
	inspect, err := cli.ContainerInspect(ctx, info.ID)
	if err != nil {
		b.Fatal(err)
	}
	cg := containerCgroup(inspect.ID)
	if cg.usageFile == "" {
		b.Log("the container's cgroup is not where a local engine puts it: no CPU figures")
	}

	var restore, untar, hostCPU, boxCPU, throttled, untarCPU time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for j := range 2 {
			if (i+j)%2 == 0 {
				t0, h0 := time.Now(), cpuTime(os.Getpid())
				a0, th0 := cg.usage()
				if _, err := c.TarIn(ctx, agent.TarInArgs{Path: fmt.Sprintf("r%d", i), Exact: true}, bytes.NewReader(archive.Bytes())); err != nil {
					b.Fatal(err)
				}
				restore += time.Since(t0)
				hostCPU += cpuTime(os.Getpid()) - h0
				a1, th1 := cg.usage()
				boxCPU, throttled = boxCPU+a1-a0, throttled+th1-th0
				continue
			}
			x0, _ := cg.usage()
			res, err := c.Exec(ctx, agent.ExecArgs{Argv: []string{"sh", "-c",
				fmt.Sprintf(`mkdir t%d && s=$(date +%%s%%N) && tar -x -p -f anchor.tar -C t%d && e=$(date +%%s%%N) && echo $((e-s))`, i, i)}}, nil, nil)
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("tar -x: %v %+v", err, res)
			}
			ns, err := strconv.ParseInt(strings.TrimSpace(string(res.Stdout)), 10, 64)
			if err != nil {
				b.Fatalf("tar -x timing %q: %v", res.Stdout, err)
			}
			untar += time.Duration(ns)
			x1, _ := cg.usage()
			untarCPU += x1 - x0
		}
	}
	b.StopTimer()
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / n }
	b.ReportMetric(ms(restore), "restore-ms")
	b.ReportMetric(ms(untar), "tar-x-ms")
	b.ReportMetric(float64(restore)/float64(untar), "restore/tar-x")
	b.ReportMetric(ms(hostCPU), "host-cpu-ms")
	if cg.usageFile != "" {
		b.ReportMetric(ms(boxCPU), "container-cpu-ms")
		b.ReportMetric(ms(throttled), "throttled-ms")
		b.ReportMetric(ms(untarCPU), "tar-x-container-cpu-ms")
	}
}

// cgroup is a container's CPU accounting (cgroup v1 under docker/, or v2).
type cgroup struct{ usageFile, statFile string }

func containerCgroup(id string) cgroup {
	v2 := func(dir string) cgroup { return cgroup{dir + "/cpu.stat", dir + "/cpu.stat"} }
	for _, c := range []cgroup{
		{"/sys/fs/cgroup/cpuacct/docker/" + id + "/cpuacct.usage", "/sys/fs/cgroup/cpu/docker/" + id + "/cpu.stat"},
		{"/sys/fs/cgroup/cpuacct/system.slice/docker-" + id + ".scope/cpuacct.usage", "/sys/fs/cgroup/cpu/system.slice/docker-" + id + ".scope/cpu.stat"},
		v2("/sys/fs/cgroup/system.slice/docker-" + id + ".scope"),
		v2("/sys/fs/cgroup/docker/" + id),
	} {
		if _, err := os.Stat(c.usageFile); err == nil {
			return c
		}
	}
	return cgroup{}
}

// usage is the CPU time the container used so far, and how long the CFS quota held it
// back (zero when unknown).
func (c cgroup) usage() (cpu, throttled time.Duration) {
	if c.usageFile == "" {
		return 0, 0
	}
	field := func(file, name string) int64 {
		b, _ := os.ReadFile(file)
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, " "); ok && k == name {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return 0
	}
	if c.usageFile == c.statFile { // v2: microseconds
		return time.Duration(field(c.statFile, "usage_usec")) * time.Microsecond,
			time.Duration(field(c.statFile, "throttled_usec")) * time.Microsecond
	}
	b, _ := os.ReadFile(c.usageFile)
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return time.Duration(n), time.Duration(field(c.statFile, "throttled_time"))
}

// plainTree is a tar of files files of bytes in all: half a source tree of perDir
// files a directory, half a .git of small objects, their contents random.
func plainTree(files, size, perDir int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	each := size / files
	body := make([]byte, 2*each)
	for i := range body {
		body[i] = byte(r.IntN(256))
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i := range files {
		var dir, name string
		if i%2 == 0 {
			dir, name = fmt.Sprintf("src/pkg%03d", i/2/perDir), fmt.Sprintf("file%05d.go", i)
		} else {
			dir, name = fmt.Sprintf(".git/objects/%02x", i%256), fmt.Sprintf("%038x", i)
		}
		n := each/2 + r.IntN(each+1)
		off := r.IntN(len(body) - n + 1)
		_ = tw.WriteHeader(&tar.Header{Name: dir + "/" + name, Mode: 0o644, Size: int64(n), Typeflag: tar.TypeReg, ModTime: time.Unix(1700000000, 0)})
		_, _ = tw.Write(body[off : off+n])
	}
	_ = tw.Close()
	return buf.Bytes()
}
