package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"github.com/cwsdev/cws/sandbox/agent/server"
)

// unixConn is a dialed unix socket that offers itself for the workspace root, as the
// Docker driver's socket connection does.
type unixConn struct {
	net.Conn
	uc     *net.UnixConn
	target agent.LocalTarget
}

func (c unixConn) UnixConn() *net.UnixConn                { return c.uc }
func (c unixConn) LocalTarget() (agent.LocalTarget, bool) { return c.target, true }

// targetOf is the LocalTarget of dir, read as the current user.
func targetOf(t testing.TB, dir string) agent.LocalTarget {
	t.Helper()
	var st syscall.Stat_t
	must(t, syscall.Stat(dir, &st))
	return agent.LocalTarget{Dir: "/workspace", UID: os.Getuid(), GID: os.Getgid(), Dev: uint64(st.Dev), Ino: st.Ino}
}

// countingLocal counts the calls its Local answered.
type countingLocal struct {
	agent.Local
	n *atomic.Int64
}

func (l countingLocal) Answer(ctx context.Context, h *agent.Header, body []byte, w io.Writer) bool {
	ok := l.Local.Answer(ctx, h, body, w)
	if ok {
		l.n.Add(1)
	}
	return ok
}

// ReadLocal counts the reads the Local answered as Go calls (agent.LocalReader).
func (l countingLocal) ReadLocal(ctx context.Context, a agent.ReadArgs, w io.Writer) (agent.ReadResult, bool, error) {
	lr, ok := l.Local.(agent.LocalReader)
	if !ok {
		return agent.ReadResult{}, false, nil
	}
	r, ok, err := lr.ReadLocal(ctx, a, w)
	if ok {
		l.n.Add(1)
	}
	return r, ok, err
}

// framesLocal is a Local that answers reads only in frames (Answer), as a Local that
// is no agent.LocalReader does; it counts them.
type framesLocal struct {
	agent.Local
	n *atomic.Int64
}

func (l framesLocal) Answer(ctx context.Context, h *agent.Header, body []byte, w io.Writer) bool {
	return countingLocal{l.Local, l.n}.Answer(ctx, h, body, w)
}

// socketAgent serves an agent on a real unix socket and returns a client with local
// reads, the workspace, and the count of calls answered locally. The client's target
// is the workspace (or, with wrongTarget, another directory).
func socketAgent(t testing.TB, wrongTarget bool) (*agent.Client, string, *atomic.Int64) {
	t.Helper()
	dir := t.TempDir()
	target := targetOf(t, dir)
	if wrongTarget {
		target = targetOf(t, t.TempDir())
	}
	sock := serveUnixAgent(t, dir)
	c, n := socketClient(t, sock, target, "typed")
	return c, dir, n
}

// serveUnixAgent serves an agent of dir on a unix socket, whose path it returns.
func serveUnixAgent(t testing.TB, dir string) string {
	t.Helper()
	srv, err := server.New(server.Config{Root: dir, Version: "test"})
	must(t, err)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	must(t, err)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { l.Close(); srv.Close() })
	return sock
}

// socketClient is a client of the agent at sock whose reads go: "typed", answered
// locally as Go calls where they can; "frames", answered locally in frames; "agent",
// to the agent. The count is of the calls answered locally.
func socketClient(t testing.TB, sock string, target agent.LocalTarget, reads string) (*agent.Client, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	dial := func(ctx context.Context) (io.ReadWriteCloser, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", sock)
		if err != nil {
			return nil, err
		}
		return unixConn{c, c.(*net.UnixConn), target}, nil
	}
	c := agent.NewClient(dial, "test", nil)
	if reads != "agent" {
		c.WithLocal(func(root *os.File, target agent.LocalTarget) (agent.Local, error) {
			lo, err := server.OpenLocal(root, target)
			if err != nil {
				return nil, err
			}
			if reads == "frames" {
				return framesLocal{lo, &n}, nil
			}
			return countingLocal{lo, &n}, nil
		})
	}
	t.Cleanup(func() { c.Close() })
	return c, &n
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("local reads need root (to take the agent's identity); CI runs as root")
		}
		t.Skip("local reads need root")
	}
}

// Reads and stats over a unix socket are answered in the host's process, with the
// agent's answers: the same content, the same refusals of the guard, and the same
// errors. Changes still go to the agent, and a read right after one sees it.
func TestLocalReads(t *testing.T) {
	requireRoot(t)
	c, dir, local := socketAgent(t, false)
	ctx := ctxT(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB: many chunks
	must(t, os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("alpha\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, ".env"), []byte("SECRET=1\n"), 0o644))
	must(t, os.Link(filepath.Join(dir, ".env"), filepath.Join(dir, "alias.txt")))
	must(t, os.Symlink("/etc/passwd", filepath.Join(dir, "out")))
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	g := &guard.Guard{Deny: []string{".env"}}

	const maxSize = 10 << 20 // as the core tools ask, with the policy's maxFileSize
	got, res, err := c.ReadFile(ctx, agent.ReadArgs{Path: "big.bin", Hash: true, MaxSize: maxSize})
	if err != nil || !bytes.Equal(got, big) || res.N != int64(len(big)) {
		t.Fatalf("read big.bin: %d bytes, %+v, %v", len(got), res, err)
	}
	if local.Load() == 0 {
		t.Fatal("the read went to the agent: no local answer")
	}
	if fi, err := c.Stat(ctx, agent.StatArgs{Path: "a.txt"}); err != nil || fi.Size != 6 {
		t.Fatalf("stat a.txt = %+v, %v", fi, err)
	}

	before := local.Load()
	for _, tc := range []struct {
		path string
		want error
	}{
		{".env", agent.ErrDenied},      // denied by name
		{"alias.txt", agent.ErrDenied}, // a hard link of a denied file
		{"out", agent.ErrTraversal},    // a symlink out of the workspace
		{"../etc/passwd", agent.ErrTraversal},
		{"missing.txt", agent.ErrNotFound},
		{"sub", agent.ErrIsDir},
	} {
		if _, _, err := c.ReadFile(ctx, agent.ReadArgs{Path: tc.path, Guard: g, MaxSize: maxSize}); !errors.Is(err, tc.want) {
			t.Errorf("read %s = %v, want %v", tc.path, err, tc.want)
		}
	}
	if local.Load() == before {
		t.Error("refusals went to the agent: no local answer")
	}

	if _, _, err := c.ReadFile(ctx, agent.ReadArgs{Path: "big.bin", MaxSize: 1 << 10}); !errors.Is(err, agent.ErrTooLarge) {
		t.Errorf("read over maxSize = %v, want ErrTooLarge", err)
	}

	if _, err := c.WriteFile(ctx, agent.WriteArgs{Path: "a.txt", Create: true}, []byte("beta\n")); err != nil {
		t.Fatal(err)
	}
	if got, _, err := c.ReadFile(ctx, agent.ReadArgs{Path: "a.txt", MaxSize: maxSize}); err != nil || string(got) != "beta\n" {
		t.Fatalf("read after write = %q, %v", got, err)
	}

	// A read with no bound is streamed by the agent (the local path gathers its answer).
	before = local.Load()
	if got, _, err := c.ReadFile(ctx, agent.ReadArgs{Path: "big.bin"}); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("unbounded read: %d bytes, %v", len(got), err)
	}
	if local.Load() != before {
		t.Error("a read with no bound was answered locally")
	}
}

// The host reads as the agent's identity: a file the agent's uid may not read is not
// read locally (the call goes to the agent, which refuses it), one it may read is.
func TestLocalReadsTakeTheAgentsIdentity(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	must(t, os.Chmod(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "private"), []byte("root only"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "public"), []byte("anyone"), 0o644))
	root, err := os.Open(dir)
	must(t, err)
	lo, err := server.OpenLocal(root, agent.LocalTarget{Dir: "/workspace", UID: 65534, GID: 65534})
	must(t, err)
	defer lo.Close()
	read := func(p string) (string, bool) {
		var out bytes.Buffer
		var buf bytes.Buffer
		ok := lo.Answer(ctxT(t), &agent.Header{Op: agent.OpRead, Args: []byte(`{"maxSize":1048576,"path":"` + p + `"}`)}, nil, &buf)
		for r := bytes.NewReader(buf.Bytes()); r.Len() > 0; {
			h, data, err := agent.ReadFrame(r)
			must(t, err)
			if h.Event == agent.EventData {
				out.Write(data)
			}
		}
		return out.String(), ok
	}
	if got, ok := read("private"); ok {
		t.Fatalf("a 0600 file of root was answered locally for uid 65534: %q", got)
	}
	if got, ok := read("public"); !ok || got != "anyone" {
		t.Fatalf("a 0644 file = %q, %v", got, ok)
	}
	// Only reads and stats are served: anything else is the agent's.
	var buf bytes.Buffer
	if lo.Answer(ctxT(t), &agent.Header{Op: agent.OpWrite, Args: []byte(`{"path":"public"}`)}, []byte("x"), &buf) || buf.Len() > 0 {
		t.Fatal("a write was answered locally")
	}
}

// A Local closed while reads run (the client dropped a broken session) lets each of
// them finish whole, or hands it to the agent; none fails because its root went away.
func TestLocalCloseDuringRead(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	big := bytes.Repeat([]byte("x"), 1<<20)
	must(t, os.WriteFile(filepath.Join(dir, "big"), big, 0o644))
	for i := range 200 {
		root, err := os.Open(dir)
		must(t, err)
		lo, err := server.OpenLocal(root, agent.LocalTarget{Dir: "/workspace", UID: os.Getuid(), GID: os.Getgid()})
		must(t, err)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var buf bytes.Buffer
				if !lo.Answer(context.Background(), &agent.Header{Op: agent.OpRead, Args: []byte(`{"maxSize":4194304,"path":"big"}`)}, nil, &buf) {
					return // closed first: the agent answers
				}
				var got bytes.Buffer
				for r := bytes.NewReader(buf.Bytes()); r.Len() > 0; {
					h, data, err := agent.ReadFrame(r)
					if err != nil {
						t.Error(err)
						return
					}
					if h.Done && h.Error != nil {
						t.Errorf("round %d: a read failed as its Local closed: %v", i, h.Error)
					}
					if h.Event == agent.EventData {
						got.Write(data)
					}
				}
				if got.Len() != len(big) {
					t.Errorf("round %d: read %d of %d bytes", i, got.Len(), len(big))
				}
			}()
		}
		time.Sleep(time.Duration(i%7) * 50 * time.Microsecond)
		lo.Close()
		wg.Wait()
		if lo.Answer(context.Background(), &agent.Header{Op: agent.OpRead, Args: []byte(`{"maxSize":4194304,"path":"big"}`)}, nil, io.Discard) {
			t.Fatal("a read after Close was answered locally")
		}
	}
}

// The identity a local read takes never leaks into the rest of the process: after
// many reads at once as another uid, every goroutine still opens root's 0600 files.
func TestLocalReadsPutTheIdentityBack(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	must(t, os.Chmod(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "public"), []byte("anyone"), 0o644))
	mine := filepath.Join(t.TempDir(), "root-only")
	must(t, os.WriteFile(mine, []byte("cws's own"), 0o600))
	root, err := os.Open(dir)
	must(t, err)
	lo, err := server.OpenLocal(root, agent.LocalTarget{Dir: "/workspace", UID: 65534, GID: 65534})
	must(t, err)
	defer lo.Close()

	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 64 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 50 {
				if !lo.Answer(context.Background(), &agent.Header{Op: agent.OpRead, Args: []byte(`{"maxSize":1048576,"path":"public"}`)}, nil, io.Discard) {
					failed.Add(1)
				}
			}
		}()
		go func() { // meanwhile, the process's own reads
			defer wg.Done()
			for range 50 {
				if _, err := os.ReadFile(mine); err != nil {
					failed.Add(1000)
				}
				runtime.Gosched()
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d local reads went to the agent, %d of the process's own reads were refused", n%1000, n/1000)
	}
}

// A descriptor that is not the workspace the host knows (whatever sits at the socket
// may pose as the agent) is refused: every read goes to the agent.
func TestLocalReadsRefuseAnotherRoot(t *testing.T) {
	requireRoot(t)
	c, dir, local := socketAgent(t, true)
	must(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("alpha\n"), 0o644))
	if got, _, err := c.ReadFile(ctxT(t), agent.ReadArgs{Path: "a.txt", MaxSize: 1 << 20}); err != nil || string(got) != "alpha\n" {
		t.Fatalf("read = %q, %v", got, err)
	}
	if n := local.Load(); n != 0 {
		t.Fatalf("%d calls were answered through a root that is not the workspace", n)
	}
}

// A cws that is not root cannot read as the workspace's user: local reads say so, and
// OpenLocal refuses, so every read goes to the agent. The test runs itself again as
// uid 65534.
func TestLocalReadsNonRoot(t *testing.T) {
	if os.Getenv("CWS_TEST_NONROOT_CHILD") == "1" {
		if os.Geteuid() == 0 {
			t.Fatal("the child runs as root")
		}
		if err := server.LocalReadsAvailable(); err == nil {
			t.Fatal("LocalReadsAvailable = nil for a process that is not root")
		}
		root, err := os.Open(t.TempDir())
		must(t, err)
		if lo, err := server.OpenLocal(root, agent.LocalTarget{Dir: "/workspace", UID: 1000, GID: 1000}); err == nil {
			lo.Close()
			t.Fatal("OpenLocal succeeded for a process that is not root")
		}
		return
	}
	requireRoot(t)
	exe, err := os.Executable()
	must(t, err)
	dir, err := os.MkdirTemp("", "cws-nonroot-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "agent.test")
	data, err := os.ReadFile(exe)
	must(t, err)
	must(t, os.WriteFile(bin, data, 0o755))
	cmd := exec.Command(bin, "-test.run=^TestLocalReadsNonRoot$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CWS_TEST_NONROOT_CHILD=1", "TMPDIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	must(t, os.Chmod(dir, 0o777))
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestLocalReadsNonRoot")) {
		t.Fatalf("as uid 65534: %v\n%s", err, out)
	}
}

// BenchmarkLocalRead4K is one 4 KiB read answered in the host's process (local
// reads): the identity switch and the read, as a Go call ("typed") or in frames
// encoded and decoded ("frames"); beside it, the same read from the agent.
//
//	go test ./sandbox/agent -run '^$' -bench LocalRead4K -benchmem
func BenchmarkLocalRead4K(b *testing.B) {
	requireRoot(b)
	dir := b.TempDir()
	must(b, os.WriteFile(filepath.Join(dir, "f4k"), bytes.Repeat([]byte("0123456789abcdef"), 256), 0o644))
	sock := serveUnixAgent(b, dir)
	for _, reads := range []string{"typed", "frames", "agent"} {
		b.Run(reads, func(b *testing.B) {
			c, local := socketClient(b, sock, targetOf(b, dir), reads)
			ctx := b.Context()
			for b.Loop() {
				if got, _, err := c.ReadFile(ctx, agent.ReadArgs{Path: "f4k", MaxSize: 10 << 20}); err != nil || len(got) != 4096 {
					b.Fatalf("read: %d bytes, %v", len(got), err)
				}
			}
			if (local.Load() == 0) != (reads == "agent") {
				b.Fatalf("%d reads answered locally", local.Load())
			}
		})
	}
}

// TestLocalReadPathsAgree: a read answered locally as a Go call, the same read answered
// locally in frames, and the same read sent to the agent give the same data, the same
// result and the same error, for files of every kind and reads of every shape.
func TestLocalReadPathsAgree(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	must(t, os.Chmod(dir, 0o755))
	rng := rand.New(rand.NewPCG(3, 1))
	bin := make([]byte, 300<<10)
	for i := range bin {
		bin[i] = byte(rng.Uint32())
	}
	files := map[string][]byte{
		"empty":               nil,
		"a.txt":               []byte("alpha\nbeta\n"),
		"bin.dat":             bin,
		"big.txt":             bytes.Repeat([]byte("0123456789abcdef\n"), 90000), // over a chunk
		"odd name ü\t.txt":    []byte("odd"),
		"bad-utf8.txt":        []byte("caf\xe9 \xff\xfe"),
		"sub/deep/nested.txt": []byte("deep"),
		".env":                []byte("SECRET=1\n"),
		".cws-policy.json":    []byte(`{}`),
		"nul.txt":             []byte("a\x00b"),
	}
	for name, b := range files {
		must(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755))
		must(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	must(t, os.Link(filepath.Join(dir, ".env"), filepath.Join(dir, "alias.txt")))
	must(t, os.Symlink("/etc/passwd", filepath.Join(dir, "out")))
	must(t, os.Symlink("a.txt", filepath.Join(dir, "in")))
	must(t, os.Symlink("missing", filepath.Join(dir, "dangling")))
	must(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "private"), []byte("root only"), 0o600))
	must(t, os.Chown(filepath.Join(dir, "private"), 0, 0))

	sock := serveUnixAgent(t, dir)
	ctx := ctxT(t)
	// As the agent's own identity (root here), and as another one: there a file only
	// root may read is refused to the local read, which hands it to the agent.
	for _, uid := range []int{os.Getuid(), 65534} {
		target := targetOf(t, dir)
		target.UID, target.GID = uid, uid
		readPathsAgree(t, ctx, sock, target)
	}
}

func readPathsAgree(t *testing.T, ctx context.Context, sock string, target agent.LocalTarget) {
	typed, typedN := socketClient(t, sock, target, "typed")
	frames, framesN := socketClient(t, sock, target, "frames")
	remote, _ := socketClient(t, sock, target, "agent")

	paths := []string{"empty", "a.txt", "bin.dat", "big.txt", "odd name ü\t.txt", "bad-utf8.txt", "sub/deep/nested.txt",
		".env", ".cws-policy.json", "nul.txt", "alias.txt", "out", "in", "dangling", "fifo", "private", "sub", "sub/deep",
		"missing.txt", "../etc/passwd", "/etc/passwd", "sub/../a.txt", "", ".", "a.txt/x", "sub//deep/nested.txt"}
	guards := []*guard.Guard{nil, {Deny: []string{".env"}}, {Allow: [][]string{{"sub/**"}}}, {Allow: [][]string{{}}}}
	shapes := []agent.ReadArgs{
		{MaxSize: 10 << 20},
		{MaxSize: 10 << 20, Hash: true},
		{MaxSize: 5},
		{Length: 7, Offset: 3},
		{Length: 1 << 20, Offset: 100000, Hash: true},
		{Offset: 1 << 30, MaxSize: 10 << 20},
		{Offset: -1, MaxSize: 10 << 20},
		{Length: -1, MaxSize: 10 << 20},
	}
	type answer struct {
		Data   []byte
		Result agent.ReadResult
		Err    *agent.WireError
		Other  string
	}
	read := func(c *agent.Client, a agent.ReadArgs) answer {
		var buf bytes.Buffer
		r, err := c.ReadTo(ctx, a, &buf)
		ans := answer{Data: buf.Bytes(), Result: r}
		if err != nil {
			if !errors.As(err, &ans.Err) {
				ans.Other = err.Error()
			}
		}
		return ans
	}
	cases := 0
	for _, p := range paths {
		for _, g := range guards {
			for _, shape := range shapes {
				a := shape
				a.Path, a.Guard = p, g
				want := read(remote, a)
				for name, c := range map[string]*agent.Client{"typed": typed, "frames": frames} {
					got := read(c, a)
					wj, _ := json.Marshal(want)
					gj, _ := json.Marshal(got)
					if !bytes.Equal(wj, gj) {
						t.Errorf("read %+v (guard %+v):\n%s: %.400s\nagent: %.400s", a, g, name, gj, wj)
					}
				}
				cases++
			}
		}
	}
	if typedN.Load() == 0 || framesN.Load() == 0 {
		t.Fatalf("answered locally: %d as Go calls, %d in frames, of %d reads each: the local paths were not taken", typedN.Load(), framesN.Load(), cases)
	}
	t.Logf("uid %d: %d reads, %d answered locally as Go calls, %d in frames", target.UID, cases, typedN.Load(), framesN.Load())
}

// TestReadNeverPastMaxSize: a file that grows between the size check and the read (a
// process of the workspace writing it) is never read past maxSize, by the agent or
// by cws's local read: each read gives at most maxSize bytes, or too_large.
func TestReadNeverPastMaxSize(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	sock := serveUnixAgent(t, dir)
	name := filepath.Join(dir, "grows")
	must(t, os.WriteFile(name, []byte("x"), 0o644))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // 1 byte, then 1 MiB, as fast as it goes
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			size := int64(1)
			if i%2 == 1 {
				size = 1 << 20
			}
			_ = os.Truncate(name, size)
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	ctx := ctxT(t)
	const maxSize = 10
	for _, reads := range []string{"typed", "frames", "agent"} {
		c, _ := socketClient(t, sock, targetOf(t, dir), reads)
		tooLarge := 0
		for range 1500 {
			var buf bytes.Buffer
			_, err := c.ReadTo(ctx, agent.ReadArgs{Path: "grows", MaxSize: maxSize}, &buf)
			switch {
			case errors.Is(err, agent.ErrTooLarge):
				tooLarge++
			case err != nil:
				t.Fatalf("%s: %v", reads, err)
			case buf.Len() > maxSize:
				t.Fatalf("%s: a read with maxSize %d gave %d bytes", reads, maxSize, buf.Len())
			}
		}
		t.Logf("%s: 1,500 reads, %d too large", reads, tooLarge)
	}
}
