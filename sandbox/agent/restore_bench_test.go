package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/tartest"
)

// BenchmarkRestore is the restore side of a wake from an archive: the exact tar.in of a
// generated tree, beside its anchor, GNU `tar -x -p` of the same archive into a sibling
// directory of the same file system, timed in the same iteration. The archive comes in
// the order the snapshot store reads it back (directories and symlinks first, regular
// files in an order that is not the paths', hard links last).
//
//	go test ./sandbox/agent -run '^$' -bench Restore -benchtime 5x
//
// It reports restore-ms and tar-x-ms per restore (wall), their ratio, and the CPU time
// each took (user and system: this process's while the restore runs, both sides of the
// agent's connection; tar's own), which a machine shared with other work disturbs less.
func BenchmarkRestore(b *testing.B) {
	for _, tc := range []struct {
		name   string
		files  int // half of them a source tree, half a .git of small objects
		bytes  int
		perDir int
	}{
		{"2000files-17MB", 2000, 17 << 20, 20},
		{"20000files-100MB", 20000, 100 << 20, 40},
	} {
		b.Run(tc.name, func(b *testing.B) {
			if _, err := exec.LookPath("tar"); err != nil {
				b.Skip("no tar to compare with")
			}
			src, srcDir, _ := pipeAgent(b)
			if err := benchTree(srcDir, tc.files, tc.bytes, tc.perDir); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var captured bytes.Buffer
			if _, err := src.TarOut(ctx, agent.TarOutArgs{Path: ".", Exact: true}, &captured); err != nil {
				b.Fatal(err)
			}
			archive := tartest.StoreOrder(captured.Bytes(), 1)
			var restore, untar, restoreCPU, untarCPU time.Duration
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				// Fresh directories each time, nothing removed until the end: ext4 skips
				// the inodes it freed a moment ago when it allocates (recently_deleted),
				// so a tree restored where the last one was just removed costs more.
				b.StopTimer()
				dst, dstDir, _ := pipeAgent(b)
				sibling := dstDir + "-tar-x" // beside it, on the same file system
				if err := os.Mkdir(sibling, 0o755); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				// Alternate which goes first: the second finds the first's dirty pages
				// being written back.
				for j := range 2 {
					if (i+j)%2 == 0 {
						t0, c0 := time.Now(), cpuTime()
						if _, err := dst.TarIn(ctx, agent.TarInArgs{Path: ".", Exact: true}, bytes.NewReader(archive)); err != nil {
							b.Fatal(err)
						}
						restore += time.Since(t0)
						restoreCPU += cpuTime() - c0
						continue
					}
					t0 := time.Now()
					cmd := exec.Command("tar", "-x", "-p", "--warning=no-unknown-keyword", "-f", "-", "-C", sibling)
					cmd.Stdin = bytes.NewReader(archive)
					if out, err := cmd.CombinedOutput(); err != nil {
						b.Fatalf("tar -x: %v: %s", err, out)
					}
					untar += time.Since(t0)
					untarCPU += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
				}
			}
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(float64(restore.Milliseconds())/n, "restore-ms")
			b.ReportMetric(float64(untar.Milliseconds())/n, "tar-x-ms")
			b.ReportMetric(float64(restore)/float64(untar), "restore/tar-x")
			b.ReportMetric(float64(restoreCPU.Milliseconds())/n, "restore-cpu-ms")
			b.ReportMetric(float64(untarCPU.Milliseconds())/n, "tar-x-cpu-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// benchTree fills dir with files regular files of bytes in all, perDir to a directory:
// half a source tree of equal files, half a .git of 256 fan-out directories.
func benchTree(dir string, files, bytes, perDir int) error {
	r := rand.New(rand.NewPCG(1, 2))
	size := bytes / files
	body := make([]byte, 2*size)
	for i := range body {
		body[i] = byte(r.IntN(256))
	}
	for i := range files {
		var p string
		if i%2 == 0 {
			p = filepath.Join("src", fmt.Sprintf("pkg%03d", i/2/perDir), fmt.Sprintf("file%05d.go", i))
		} else {
			p = filepath.Join(".git", "objects", fmt.Sprintf("%02x", i%256), fmt.Sprintf("%038x", i))
		}
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		n := size/2 + r.IntN(size+1) // size on average
		off := r.IntN(len(body) - n + 1)
		if err := os.WriteFile(p, body[off:off+n], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
