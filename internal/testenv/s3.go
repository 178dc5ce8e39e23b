package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Server is a real S3 server for tests: SeaweedFS's `weed server -s3`, built by
// scripts/s3.sh into ~/.cache/cws-s3 (Apache-2.0; MinIO's server is AGPL).
type S3Server struct {
	Endpoint  string // http://127.0.0.1:PORT
	AccessKey string
	SecretKey string
}

// Env returns the AWS_* variables that point the snapshot store's s3:// backend at it.
func (s *S3Server) Env() map[string]string {
	return map[string]string{"AWS_ENDPOINT_URL": s.Endpoint, "AWS_ACCESS_KEY_ID": s.AccessKey,
		"AWS_SECRET_ACCESS_KEY": s.SecretKey, "AWS_REGION": "us-east-1"}
}

// Getenv looks a name up in Env.
func (s *S3Server) Getenv(k string) string { return s.Env()[k] }

// WeedEnv names the weed binary tests use; default ~/.cache/cws-s3/weed.
const WeedEnv = "CWS_WEED"

var (
	s3Once sync.Once
	s3Srv  *S3Server
	s3Err  error
)

// S3 returns the test process's S3 server, started on first use (it lives as long as
// the test binary), and a fresh bucket in it. Without weed it skips locally and fails
// in CI (`make test` builds it: scripts/s3.sh).
func S3(t testing.TB) (*S3Server, string) {
	t.Helper()
	s3Once.Do(func() { s3Srv, s3Err = startWeed() })
	if s3Err != nil {
		if InCI() {
			t.Fatalf("an S3 server is required in CI (scripts/s3.sh builds weed): %v", s3Err)
		}
		t.Skipf("skipping: no S3 server (run scripts/s3.sh build): %v", s3Err)
	}
	c, err := minio.New(strings.TrimPrefix(s3Srv.Endpoint, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(s3Srv.AccessKey, s3Srv.SecretKey, ""), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	bucket := fmt.Sprintf("t%d-%d", os.Getpid(), time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		err = c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{})
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond) // the filer may still be starting
	}
	if err != nil {
		t.Fatalf("make bucket %s: %v", bucket, err)
	}
	return s3Srv, bucket
}

func weedBinary() (string, error) {
	if p := os.Getenv(WeedEnv); p != "" {
		return p, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(home, ".cache", "cws-s3", "weed")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no weed at %s: %w", p, err)
	}
	return p, nil
}

// startWeed starts `weed server` with S3 on free loopback ports, data in a temporary
// directory, one identity with every right, and waits until S3 answers.
func startWeed() (*S3Server, error) {
	bin, err := weedBinary()
	if err != nil {
		return nil, err
	}
	sweepWeedDirs()
	dir, err := os.MkdirTemp("", weedDirPrefix)
	if err != nil {
		return nil, err
	}
	srv := &S3Server{AccessKey: "cws-test", SecretKey: "cws-test-secret-0123456789"}
	cfg := filepath.Join(dir, "s3.json")
	if err := os.WriteFile(cfg, []byte(`{"identities":[{"name":"cws","credentials":[{"accessKey":"`+srv.AccessKey+
		`","secretKey":"`+srv.SecretKey+`"}],"actions":["Admin","Read","Write","List","Tagging"]}]}`), 0o600); err != nil {
		return nil, err
	}
	// weed's gRPC ports are its HTTP ports + 10000: pick bases whose both are free.
	ports := make([]int, 0, 4)
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
	cmd := exec.Command(bin, "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-dir="+data,
		"-master.port="+strconv.Itoa(ports[0]), "-volume.port="+strconv.Itoa(ports[1]),
		"-filer", "-filer.port="+strconv.Itoa(ports[2]), "-s3", "-s3.port="+strconv.Itoa(ports[3]), "-s3.config="+cfg,
		"-volume.max=0", "-master.volumeSizeLimitMB=64")
	log, err := os.Create(filepath.Join(dir, "weed.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	// weed outlives every test of this process and must die with it: the kernel's
	// parent-death signal comes when the forking thread ends, so that thread is held
	// until weed exits.
	dieWithParent(cmd)
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// weed dies with this process, and nothing then removes its data: the next
	// start removes the directories whose weed is gone (sweepWeedDirs).
	_ = os.WriteFile(filepath.Join(dir, weedPIDFile), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600)
	srv.Endpoint = "http://127.0.0.1:" + strconv.Itoa(ports[3])
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(srv.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return srv, nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	b, _ := os.ReadFile(filepath.Join(dir, "weed.log"))
	return nil, errors.New("weed's S3 did not answer within 60 s: " + lastLines(string(b), 20))
}

const (
	weedDirPrefix = "cws-weed-"
	weedPIDFile   = "weed.pid"
)

// sweepWeedDirs removes the data directories of earlier test processes' weed servers
// that are gone (each test process starts one, which dies with it and leaves its
// directory: 160 MB or more each, run after run). A directory without a pid file is
// left for a minute: its weed may be starting.
func sweepWeedDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), weedDirPrefix+"*"))
	for _, dir := range dirs {
		if b, err := os.ReadFile(filepath.Join(dir, weedPIDFile)); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && weedAlive(pid) {
				continue
			}
		} else if fi, err := os.Stat(dir); err != nil || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

// weedAlive says whether process pid runs and is a weed (its program is named weed).
func weedAlive(pid int) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	argv0, _, _ := strings.Cut(string(cmdline), "\x00")
	return err == nil && filepath.Base(argv0) == "weed"
}

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

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
