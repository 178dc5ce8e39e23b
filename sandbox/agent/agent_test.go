package agent_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server"
)

// pipeAgent serves a Server over net.Pipe: every dial is a fresh pipe, as a fresh
// `docker exec` would be. It returns the client and a func that breaks the current pipe.
func pipeAgent(t testing.TB) (*agent.Client, string, func()) {
	t.Helper()
	dir := t.TempDir()
	srv, err := server.New(server.Config{Root: dir, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var last net.Conn
	dial := func(ctx context.Context) (io.ReadWriteCloser, error) {
		c, s := net.Pipe()
		go srv.ServeConn(s)
		mu.Lock()
		last = c
		mu.Unlock()
		return c, nil
	}
	c := agent.NewClient(dial, "test", nil)
	t.Cleanup(func() { c.Close(); srv.Close() })
	breakIt := func() {
		mu.Lock()
		defer mu.Unlock()
		last.Close()
	}
	return c, dir, breakIt
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestFraming(t *testing.T) {
	var buf bytes.Buffer
	body := bytes.Repeat([]byte{0, 1, 2, 255}, 1000)
	if err := agent.WriteFrame(&buf, &agent.Header{Op: "read", Args: []byte(`{"path":"a"}`)}, body); err != nil {
		t.Fatal(err)
	}
	if err := agent.WriteFrame(&buf, &agent.Header{Done: true}, nil); err != nil {
		t.Fatal(err)
	}
	h, got, err := agent.ReadFrame(&buf)
	if err != nil || h.Op != "read" || string(h.Args) != `{"path":"a"}` || !bytes.Equal(got, body) {
		t.Fatalf("first frame: %+v %d bytes %v", h, len(got), err)
	}
	if h, _, err := agent.ReadFrame(&buf); err != nil || !h.Done {
		t.Fatalf("second frame: %+v %v", h, err)
	}
	if _, _, err := agent.ReadFrame(&buf); !errors.Is(err, io.EOF) {
		t.Fatalf("end of stream: got %v, want io.EOF", err)
	}

	t.Run("oversized frame is refused before allocating", func(t *testing.T) {
		raw := []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}
		if _, _, err := agent.ReadFrame(bytes.NewReader(raw)); err == nil || !strings.Contains(err.Error(), "too large") {
			t.Fatalf("got %v, want a too-large error", err)
		}
		if err := agent.WriteFrame(io.Discard, &agent.Header{}, make([]byte, agent.MaxBody+1)); err == nil {
			t.Fatal("writing an oversized body succeeded")
		}
	})
	t.Run("truncated frame", func(t *testing.T) {
		var b bytes.Buffer
		_ = agent.WriteFrame(&b, &agent.Header{Op: "x"}, []byte("hello"))
		cut := b.Bytes()[:b.Len()-2]
		if _, _, err := agent.ReadFrame(bytes.NewReader(cut)); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("got %v, want io.ErrUnexpectedEOF", err)
		}
	})
}

func TestReadWriteRoundTrip(t *testing.T) {
	c, _, _ := pipeAgent(t)
	ctx := ctxT(t)
	big := make([]byte, 5<<20)
	_, _ = rand.Read(big)
	for name, content := range map[string][]byte{
		"empty.txt": {},
		"text.txt":  []byte("hello, wörld\n"),
		"bin.dat":   big,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := c.WriteFile(ctx, agent.WriteArgs{Path: "d/" + name, Atomic: true, Create: true, Mkdirs: true}, content); err != nil {
				t.Fatal(err)
			}
			got, res, err := c.ReadFile(ctx, agent.ReadArgs{Path: "d/" + name, Hash: true})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, content) || res.N != int64(len(content)) || res.Info.Size != int64(len(content)) {
				t.Fatalf("read %d bytes (n=%d, size=%d), wrote %d", len(got), res.N, res.Info.Size, len(content))
			}
			if wantBin := name == "bin.dat"; res.IsBinary != wantBin {
				t.Fatalf("isBinary = %v, want %v", res.IsBinary, wantBin)
			}
		})
	}
	t.Run("range", func(t *testing.T) {
		got, _, err := c.ReadFile(ctx, agent.ReadArgs{Path: "d/text.txt", Offset: 7, Length: 6})
		if err != nil || string(got) != "wörld" {
			t.Fatalf("got %q, %v", got, err)
		}
	})
	t.Run("max size", func(t *testing.T) {
		_, err := c.WriteFile(ctx, agent.WriteArgs{Path: "x", Create: true, MaxSize: 3}, []byte("four"))
		if !errors.Is(err, agent.ErrTooLarge) {
			t.Fatalf("got %v, want ErrTooLarge", err)
		}
		_, _, err = c.ReadFile(ctx, agent.ReadArgs{Path: "d/text.txt", MaxSize: 3})
		if !errors.Is(err, agent.ErrTooLarge) {
			t.Fatalf("got %v, want ErrTooLarge", err)
		}
	})
	t.Run("missing file is not_found", func(t *testing.T) {
		if _, _, err := c.ReadFile(ctx, agent.ReadArgs{Path: "nope"}); !errors.Is(err, agent.ErrNotFound) {
			t.Fatalf("got %v, want ErrNotFound", err)
		}
	})
}

func TestPathsStayInWorkspace(t *testing.T) {
	c, dir, _ := pipeAgent(t)
	ctx := ctxT(t)
	outside := filepath.Join(filepath.Dir(dir), "outside-"+filepath.Base(dir))
	if err := os.WriteFile(outside, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(outside) })
	must(t, os.Symlink("/etc/passwd", filepath.Join(dir, "passwd")))
	must(t, os.Symlink("../"+filepath.Base(outside), filepath.Join(dir, "rel")))
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	must(t, os.Symlink("../..", filepath.Join(dir, "sub", "up")))
	must(t, os.WriteFile(filepath.Join(dir, "ok.txt"), []byte("ok"), 0o644))
	must(t, os.Symlink("ok.txt", filepath.Join(dir, "inside")))

	for _, p := range []string{"../x", "/etc/passwd", "a/../../x", "passwd", "rel", "sub/up/etc/passwd", "bad\x00name"} {
		t.Run(p, func(t *testing.T) {
			_, _, err := c.ReadFile(ctx, agent.ReadArgs{Path: p})
			if !errors.Is(err, agent.ErrTraversal) {
				t.Fatalf("read %q: got %v, want ErrTraversal", p, err)
			}
			_, err = c.WriteFile(ctx, agent.WriteArgs{Path: p, Create: true}, []byte("pwned"))
			if !errors.Is(err, agent.ErrTraversal) {
				t.Fatalf("write %q: got %v, want ErrTraversal", p, err)
			}
		})
	}
	if b, _ := os.ReadFile(outside); string(b) != "secret" {
		t.Fatalf("file outside the workspace changed: %q", b)
	}
	got, _, err := c.ReadFile(ctx, agent.ReadArgs{Path: "inside"})
	if err != nil || string(got) != "ok" {
		t.Fatalf("a symlink inside the workspace: %q, %v", got, err)
	}
	got, _, err = c.ReadFile(ctx, agent.ReadArgs{Path: filepath.Join(dir, "ok.txt")})
	if err != nil || string(got) != "ok" {
		t.Logf("absolute path under the temp root (not /workspace) is refused as expected: %v", err)
	}
}

func TestConcurrentCallsDoNotBlock(t *testing.T) {
	c, _, _ := pipeAgent(t)
	ctx := ctxT(t)
	if _, err := c.WriteFile(ctx, agent.WriteArgs{Path: "f", Create: true}, []byte("data")); err != nil {
		t.Fatal(err)
	}
	slowDone := make(chan struct{})
	go func() {
		defer close(slowDone)
		_, _ = c.Exec(ctx, agent.ExecArgs{Argv: []string{"sleep", "3"}}, nil, nil)
	}()
	time.Sleep(100 * time.Millisecond)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, _, err := c.ReadFile(ctx, agent.ReadArgs{Path: "f"})
			if err == nil && string(b) != "data" {
				err = errors.New("wrong content " + string(b))
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-slowDone:
		t.Fatal("50 reads waited for the 3 s command: calls block each other")
	default:
	}
}

func TestCancelKillsProcessGroup(t *testing.T) {
	c, dir, _ := pipeAgent(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	// The shell records its child's pid, then both sleep.
	script := "sleep 1000 & echo $! > child.pid; wait"
	errc := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, agent.ExecArgs{Argv: []string{"sh", "-c", script}}, nil, nil)
		errc <- err
	}()
	pidFile := filepath.Join(dir, "child.pid")
	waitFor(t, func() bool { b, _ := os.ReadFile(pidFile); return len(bytes.TrimSpace(b)) > 0 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	b, _ := os.ReadFile(pidFile)
	pid := atoi(t, strings.TrimSpace(string(b)))
	waitFor(t, func() bool { return !alive(pid) })
}

func TestExecTimeoutAndCap(t *testing.T) {
	c, _, _ := pipeAgent(t)
	ctx := ctxT(t)
	res, err := c.Exec(ctx, agent.ExecArgs{Argv: []string{"sleep", "1000"}, TimeoutMS: 300}, nil, nil)
	if err != nil || !res.TimedOut || res.ExitCode != -1 {
		t.Fatalf("timeout: %+v %v", res, err)
	}
	res, err = c.Exec(ctx, agent.ExecArgs{Argv: []string{"yes"}, TimeoutMS: 500, OutputCap: 64 << 10}, nil, nil)
	if err != nil || !res.StdoutTruncated || len(res.Stdout) != 64<<10 {
		t.Fatalf("cap: truncated=%v len=%d err=%v", res.StdoutTruncated, len(res.Stdout), err)
	}
	var streamed bytes.Buffer
	res, err = c.Exec(ctx, agent.ExecArgs{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, Stream: true}, nil,
		func(ev string, data []byte) error { streamed.WriteString(ev + ":" + string(data)); return nil })
	if err != nil || res.ExitCode != 3 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
		t.Fatalf("exit code/output: %+v %v", res, err)
	}
	if !strings.Contains(streamed.String(), "stdout:out") || !strings.Contains(streamed.String(), "stderr:err") {
		t.Fatalf("streamed %q", streamed.String())
	}
	res, err = c.Exec(ctx, agent.ExecArgs{Argv: []string{"cat"}}, []byte("from stdin"), nil)
	if err != nil || string(res.Stdout) != "from stdin" {
		t.Fatalf("stdin: %+v %v", res, err)
	}
	res, err = c.Exec(ctx, agent.ExecArgs{Argv: []string{"no-such-command-xyz"}}, nil, nil)
	if err != nil || res.ExitCode != -1 || !strings.Contains(res.StartError, "not found") {
		t.Fatalf("missing command: %+v %v", res, err)
	}
}

func TestVersionMismatch(t *testing.T) {
	t.Run("agent refuses an old host", func(t *testing.T) {
		srv, err := server.New(server.Config{Root: t.TempDir(), Version: "test"})
		must(t, err)
		c, s := net.Pipe()
		go srv.ServeConn(s)
		must(t, agent.WriteHello(c, agent.Hello{Protocol: agent.ProtocolVersion + 1, Version: "future"}))
		h, err := agent.ReadHello(c)
		if err != nil || h.Error == "" {
			t.Fatalf("got %+v %v, want a refusal", h, err)
		}
	})
	t.Run("host refuses another agent", func(t *testing.T) {
		dial := func(ctx context.Context) (io.ReadWriteCloser, error) {
			c, s := net.Pipe()
			go func() {
				_, _ = agent.ReadHello(s)
				_ = agent.WriteHello(s, agent.Hello{Protocol: agent.ProtocolVersion + 1, Version: "9.9.9"})
			}()
			return c, nil
		}
		_, err := agent.NewClient(dial, "test", nil).Ping(ctxT(t))
		if !errors.Is(err, agent.ErrVersion) || !strings.Contains(err.Error(), "9.9.9") || !strings.Contains(err.Error(), "recreate the session") {
			t.Fatalf("got %v, want ErrVersion naming the agent and what to do", err)
		}
	})
}

func TestReconnectKeepsBackgroundProcesses(t *testing.T) {
	c, _, breakIt := pipeAgent(t)
	ctx := ctxT(t)
	p, err := c.ProcStart(ctx, agent.ProcStartArgs{Argv: []string{"sh", "-c", "echo started; sleep 1000"}})
	must(t, err)
	breakIt()
	procs, err := c.ProcList(ctx) // idempotent: redials transparently
	must(t, err)
	if len(procs) != 1 || procs[0].ID != p.ID || !procs[0].Running {
		t.Fatalf("after reconnect: %+v", procs)
	}
	out, err := c.ProcOutput(ctx, agent.ProcOutputArgs{ID: p.ID, WaitMS: 2000})
	if err != nil || string(out.Stdout) != "started\n" {
		t.Fatalf("output: %+v %v", out, err)
	}
	killed, err := c.ProcKill(ctx, agent.ProcKillArgs{ID: p.ID})
	if err != nil || killed.Running || alive(p.PID) {
		t.Fatalf("kill: %+v %v", killed, err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met within 10 s")
}

func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, _ := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	return !strings.Contains(string(b), ") Z ")
}

// Output near the cap travels raw in the done frame's body: base64 inside the JSON
// header would overflow the header limit (a regression: 1 MiB of output was lost).
func TestExecLargeOutput(t *testing.T) {
	c, _, _ := pipeAgent(t)
	res, err := c.Exec(ctxT(t), agent.ExecArgs{Argv: []string{"sh", "-c", "head -c 1048576 /dev/zero; head -c 1048576 /dev/zero >&2"}, OutputCap: 1 << 20}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 1<<20 || len(res.Stderr) != 1<<20 || res.StdoutTruncated || res.StderrTruncated {
		t.Fatalf("stdout %d, stderr %d bytes, truncated %v/%v", len(res.Stdout), len(res.Stderr), res.StdoutTruncated, res.StderrTruncated)
	}
}

func TestTarRoundTrip(t *testing.T) {
	c, dir, _ := pipeAgent(t)
	ctx := ctxT(t)
	must(t, os.MkdirAll(filepath.Join(dir, "src/sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "src/sub/a.txt"), []byte("alpha"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "src/b.bin"), bytes.Repeat([]byte{0, 1}, 300_000), 0o644))
	var archive bytes.Buffer
	out, err := c.TarOut(ctx, agent.TarOutArgs{Path: "src"}, &archive)
	if err != nil || out.Files != 2 {
		t.Fatalf("tar out: %+v %v", out, err)
	}
	in, err := c.TarIn(ctx, agent.TarInArgs{Path: "copy"}, &archive)
	if err != nil || in.Files != 2 || in.Bytes != out.Bytes {
		t.Fatalf("tar in: %+v (out %+v) %v", in, out, err)
	}
	for _, f := range []string{"sub/a.txt", "b.bin"} {
		a, _ := os.ReadFile(filepath.Join(dir, "src", f))
		b, _ := os.ReadFile(filepath.Join(dir, "copy", f))
		if !bytes.Equal(a, b) {
			t.Fatalf("%s differs after the round trip", f)
		}
	}
	t.Run("an entry escaping the workspace is refused", func(t *testing.T) {
		var evil bytes.Buffer
		tw := tar.NewWriter(&evil)
		_ = tw.WriteHeader(&tar.Header{Name: "../../escape.txt", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte("hi"))
		_ = tw.Close()
		if _, err := c.TarIn(ctx, agent.TarInArgs{}, &evil); !errors.Is(err, agent.ErrTraversal) {
			t.Fatalf("got %v, want a traversal", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "escape.txt")); err == nil {
			t.Fatal("entry extracted inside the workspace after all")
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(filepath.Dir(dir)), "escape.txt")); err == nil {
			t.Fatal("entry escaped the workspace")
		}
	})
}
