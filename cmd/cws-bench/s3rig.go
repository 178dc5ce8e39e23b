package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/cwsdev/cws/internal/s3proxy"
	"github.com/cwsdev/cws/snapshot"
)

// s3Rig is what the archive sections store their archives in: a SeaweedFS server of
// their own (`weed`, as the tests run it: scripts/s3.sh builds it), with the snapshot
// store reaching it through a proxy that counts the requests by kind and can add a
// delay to each, as a real region's latency would.
type s3Rig struct {
	proxy *s3proxy.Server
	store *snapshot.Store
	cmd   *exec.Cmd
	dir   string
}

// weedEnv names the weed binary; default ~/.cache/cws-s3/weed (internal/testenv's).
const weedEnv = "CWS_WEED"

const (
	rigAccessKey = "cws-bench"
	rigSecretKey = "cws-bench-secret-0123456789"
)

// startS3Rig starts weed on free loopback ports with its data in a temporary
// directory, the proxy in front of it, a bucket, and the snapshot store on s3://
// through the proxy. close stops weed and removes its data.
func startS3Rig(ctx context.Context, e *env) (r *s3Rig, err error) {
	bin := os.Getenv(weedEnv)
	if bin == "" {
		home, _ := os.UserHomeDir()
		bin = filepath.Join(home, ".cache", "cws-s3", "weed")
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("no S3 server: %w (scripts/s3.sh builds weed, or set %s)", err, weedEnv)
	}
	dir, err := os.MkdirTemp("", "cws-bench-weed-")
	if err != nil {
		return nil, err
	}
	r = &s3Rig{dir: dir}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	cfg := filepath.Join(dir, "s3.json")
	if err := os.WriteFile(cfg, []byte(`{"identities":[{"name":"cws","credentials":[{"accessKey":"`+rigAccessKey+
		`","secretKey":"`+rigSecretKey+`"}],"actions":["Admin","Read","Write","List","Tagging"]}]}`), 0o600); err != nil {
		return nil, err
	}
	// weed's gRPC ports are its HTTP ports + 10000: bases whose both are free.
	var ports []int
	for len(ports) < 4 {
		p, err := freePortPair()
		if err != nil {
			return nil, err
		}
		ports = append(ports, p)
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "weed.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	r.cmd = exec.Command(bin, "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-dir="+data,
		"-master.port="+strconv.Itoa(ports[0]), "-volume.port="+strconv.Itoa(ports[1]),
		"-filer", "-filer.port="+strconv.Itoa(ports[2]), "-s3", "-s3.port="+strconv.Itoa(ports[3]), "-s3.config="+cfg,
		"-volume.max=0", "-master.volumeSizeLimitMB=64")
	r.cmd.Stdout, r.cmd.Stderr = log, log
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		return nil, err
	}
	endpoint := "http://127.0.0.1:" + strconv.Itoa(ports[3])
	e.logf("s3: weed at %s (data in %s)…", endpoint, dir)
	if r.proxy, err = s3proxy.Start(endpoint, "127.0.0.1:0"); err != nil {
		return nil, err
	}
	const bucket = "cws-bench"
	if err := makeBucket(ctx, endpoint, bucket); err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, "weed.log"))
		return nil, fmt.Errorf("%w; weed's log ends:\n%s", err, tail(string(b), 20))
	}
	env := map[string]string{"AWS_ENDPOINT_URL": r.proxy.URL, "AWS_ACCESS_KEY_ID": rigAccessKey,
		"AWS_SECRET_ACCESS_KEY": rigSecretKey, "AWS_REGION": "us-east-1"}
	b, err := snapshot.NewS3Backend(ctx, bucket, "cws", func(k string) string { return env[k] })
	if err != nil {
		return nil, err
	}
	r.store = snapshot.NewStore(b)
	return r, nil
}

// makeBucket creates bucket, waiting up to a minute for weed's S3 to answer (its filer
// starts last).
func makeBucket(ctx context.Context, endpoint, bucket string) error {
	c, err := minio.New(strings.TrimPrefix(endpoint, "http://"), &minio.Options{Region: "us-east-1",
		Creds: credentials.NewStaticV4(rigAccessKey, rigSecretKey, ""), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		err = c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("weed's S3 at %s: make bucket: %w", endpoint, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// close stops the proxy and weed and removes weed's data.
func (r *s3Rig) close() {
	if r.proxy != nil {
		_ = r.proxy.Close()
	}
	if r.cmd != nil && r.cmd.Process != nil {
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL) // weed and anything it started
		_ = r.cmd.Wait()
	}
	_ = os.RemoveAll(r.dir)
}

// counts is what went through the proxy so far.
func (r *s3Rig) counts() s3proxy.Counts { return r.proxy.Counts() }

// freePortPair returns a free loopback port p below 55000 whose p+10000 is free too.
func freePortPair() (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p > 55000 {
			continue
		}
		if l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000)); err == nil {
			l2.Close()
			return p, nil
		}
	}
	return 0, errors.New("no free port pair")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// restoreLog is the Service's log as the archive sections give it: warnings and errors
// go to the progress stream, and each "archive restored" line's timings (the sandbox
// ready, then the restore's own part) are kept for the rows.
type restoreLog struct {
	out  slog.Handler
	seen *restoreTimes
}

type restoreTimes struct {
	mu    sync.Mutex
	ready []time.Duration
	took  []time.Duration
}

func newRestoreLog(e *env) (*slog.Logger, *restoreTimes) {
	t := &restoreTimes{}
	return slog.New(restoreLog{out: slog.NewTextHandler(e.progress, &slog.HandlerOptions{Level: slog.LevelWarn}), seen: t}), t
}

// Enabled takes Debug too: the wake's "restore: tar.in" line (how long the store's
// read and the agent waited for each other) goes to the progress stream.
func (h restoreLog) Enabled(ctx context.Context, l slog.Level) bool { return l >= slog.LevelDebug }

func (h restoreLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "archive restored" {
		var ready, took time.Duration
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "sandbox_ready":
				ready = a.Value.Duration()
			case "restore":
				took = a.Value.Duration()
			}
			return true
		})
		h.seen.mu.Lock()
		h.seen.ready, h.seen.took = append(h.seen.ready, ready), append(h.seen.took, took)
		h.seen.mu.Unlock()
	}
	if r.Message == "restore: tar.in" {
		return h.out.Handle(ctx, r)
	}
	if !h.out.Enabled(ctx, r.Level) {
		return nil
	}
	return h.out.Handle(ctx, r)
}

func (h restoreLog) WithAttrs(as []slog.Attr) slog.Handler {
	return restoreLog{out: h.out.WithAttrs(as), seen: h.seen}
}

func (h restoreLog) WithGroup(name string) slog.Handler {
	return restoreLog{out: h.out.WithGroup(name), seen: h.seen}
}

// last returns the timings of the last restore logged, and whether one was.
func (t *restoreTimes) last() (ready, took time.Duration, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.took) == 0 {
		return 0, 0, false
	}
	return t.ready[len(t.ready)-1], t.took[len(t.took)-1], true
}

// count is how many restores were logged.
func (t *restoreTimes) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.took)
}
