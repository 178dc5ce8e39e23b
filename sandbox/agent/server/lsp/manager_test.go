package lsp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
)

// fakeLS is the path of the fake language server built once for the package's tests.
var fakeLS string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fakels")
	if err != nil {
		panic(err)
	}
	fakeLS = filepath.Join(dir, "fakels")
	out, err := exec.Command("go", "build", "-o", fakeLS, "./testdata/fakels").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build fakels: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// diskFiles reads a directory, refusing the names in deny as the agent's guard would.
type diskFiles struct {
	root string
	deny map[string]bool
}

func (f diskFiles) Read(rel string) ([]byte, error) {
	if f.deny[rel] {
		return nil, agent.Errorf(agent.CodeDenied, rel, "path not allowed by policy")
	}
	b, err := os.ReadFile(filepath.Join(f.root, rel))
	if errors.Is(err, os.ErrNotExist) {
		return nil, agent.Errorf(agent.CodeNotFound, rel, "no such file")
	}
	return b, err
}

type fixture struct {
	t     *testing.T
	m     *Manager
	root  string
	files diskFiles
}

func newFixture(t *testing.T, env map[string]string, tweak func(*Config)) *fixture {
	t.Helper()
	root := t.TempDir()
	cfg := Config{
		Root: root,
		Path: "/usr/bin:/bin",
		Languages: []Language{{
			Name: "Fake", Exts: map[string]string{".fk": "fake"}, Servers: []Command{{Bin: fakeLS}},
			Missing: "build fakels", Env: env,
		}},
		DiagnosticsWait: 5 * time.Second,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	m := New(cfg)
	t.Cleanup(m.Close)
	return &fixture{t: t, m: m, root: root, files: diskFiles{root: root, deny: map[string]bool{}}}
}

func (f *fixture) write(rel, content string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.root, rel), []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) run(tool string, args any) (json.RawMessage, int, error) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, _ := json.Marshal(args)
	return f.m.Run(ctx, tool, raw, f.files)
}

func (f *fixture) must(tool string, args any) json.RawMessage {
	f.t.Helper()
	res, _, err := f.run(tool, args)
	if err != nil {
		f.t.Fatalf("%s: %v", tool, err)
	}
	return res
}

// hoverInfo is what the fake answers in a hover.
type hoverInfo struct {
	Opens, Changes, Version int
	Word                    string
	Answers                 map[string]json.RawMessage
	Watched                 []string
	Open                    []string // the documents open, by base name
	Range                   Span
}

func (f *fixture) hover(rel string, line, char int) hoverInfo {
	f.t.Helper()
	var h hover
	if err := json.Unmarshal(f.must("get_hover", map[string]any{"file_path": rel, "line": line, "character": char}), &h); err != nil {
		f.t.Fatal(err)
	}
	var info hoverInfo
	if err := json.Unmarshal([]byte(h.Contents), &info); err != nil {
		f.t.Fatalf("hover contents %q: %v", h.Contents, err)
	}
	if h.Range != nil {
		info.Range = *h.Range
	}
	return info
}

func TestLazyStartSyncAndServerRequests(t *testing.T) {
	for _, enc := range []string{"utf-16", "utf-8"} {
		t.Run(enc, func(t *testing.T) {
			f := newFixture(t, map[string]string{"FAKE_ENC": enc}, nil)
			if st := f.m.Status(); len(st) != 0 {
				t.Fatalf("servers before any request: %v", st)
			}
			f.write("a.fk", "// héllo 🎉 world\r\n\tx := Sym + 1\r\n")
			h := f.hover("a.fk", 2, 8)
			if h.Word != "Sym" || h.Opens != 1 || h.Changes != 0 || h.Version != 1 {
				t.Fatalf("first hover: %+v", h)
			}
			if want := (Span{Pos{2, 7}, Pos{2, 10}}); h.Range != want {
				t.Errorf("hover range %v, want %v", h.Range, want)
			}
			st := f.m.Status()
			if len(st) != 1 || st[0].Encoding != Encoding(enc) {
				t.Fatalf("status: %+v", st)
			}
			// Unchanged on disk: no didChange. Changed: one, with the full text.
			if h := f.hover("a.fk", 2, 8); h.Changes != 0 || h.Version != 1 {
				t.Errorf("unchanged file re-sent: %+v", h)
			}
			f.write("a.fk", "// 🎉🎉 now\r\n\tx := 1 + Sym\r\n")
			if h := f.hover("a.fk", 2, 12); h.Word != "Sym" || h.Changes != 1 || h.Version != 2 {
				t.Errorf("after a change on disk: %+v", h)
			}
			// The requests the fake sent after initialized were answered as an editor would.
			var answers map[string]json.RawMessage
			for range 100 {
				if answers = f.hover("a.fk", 1, 1).Answers; len(answers) == 7 {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			want := map[string]string{
				"workspace/configuration":        `[null,null]`,
				"client/registerCapability":      `null`,
				"window/workDoneProgress/create": `null`,
				"workspace/workspaceFolders":     fmt.Sprintf(`[{"uri":"file://%s","name":"workspace"}]`, f.root),
				"window/showMessageRequest":      `null`,
			}
			for method, w := range want {
				if string(answers[method]) != w {
					t.Errorf("%s answered %s, want %s", method, answers[method], w)
				}
			}
			if !strings.Contains(string(answers["workspace/applyEdit"]), `"applied":false`) {
				t.Errorf("applyEdit answered %s", answers["workspace/applyEdit"])
			}
			if !strings.Contains(string(answers["fake/unknown"]), "-32601") {
				t.Errorf("unknown request answered %s, want MethodNotFound", answers["fake/unknown"])
			}
		})
	}
}

func TestWatchedFilesInTheDirectory(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.write("a.fk", "Sym\n")
	f.write("notes.txt", "not the language's\n")
	f.hover("a.fk", 1, 1) // the baseline: nothing reported
	f.write("b.fk", "new\n")
	f.write("notes.txt", "changed, but not a source file\n")
	if h := f.hover("a.fk", 1, 1); strings.Join(h.Watched, ",") != "1:b.fk" {
		t.Fatalf("after creating b.fk: %v", h.Watched)
	}
	f.write("b.fk", "changed b\n")
	if h := f.hover("a.fk", 1, 1); strings.Join(h.Watched, ",") != "1:b.fk,2:b.fk" {
		t.Fatalf("after changing b.fk: %v", h.Watched)
	}
	os.Remove(filepath.Join(f.root, "b.fk"))
	if h := f.hover("a.fk", 1, 1); strings.Join(h.Watched, ",") != "1:b.fk,2:b.fk,3:b.fk" {
		t.Fatalf("after deleting b.fk: %v", h.Watched)
	}
	// An open file is synced with didChange, not reported as watched.
	f.write("a.fk", "Sym changed\n")
	if h := f.hover("a.fk", 1, 1); len(h.Watched) != 3 || h.Changes != 1 {
		t.Fatalf("after changing the open file: %+v", h)
	}
}

func TestDefinitionPathsAndDenied(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.files.deny["secret.fk"] = true
	f.write("b.fk", "é🎉 Target\n")
	f.write("secret.fk", "hidden\n")
	f.write("a.fk", "loc b.fk 0 4\nloc secret.fk 0 0\nloc /usr/lib/os-release 0 0\n")
	res, dropped, err := f.run("get_definition", map[string]any{"file_path": "a.fk", "line": 1, "character": 1})
	if err != nil {
		t.Fatal(err)
	}
	var locs []Location
	_ = json.Unmarshal(res, &locs)
	if dropped != 1 || len(locs) != 2 {
		t.Fatalf("got %s, dropped %d; want 2 locations and 1 dropped", res, dropped)
	}
	// UTF-16 unit 4 of "é🎉 Target" is "T", the 4th code point.
	if want := (Location{URI: "file:///workspace/b.fk", Range: Span{Pos{1, 4}, Pos{1, 7}}}); locs[0] != want {
		t.Errorf("workspace location %+v, want %+v", locs[0], want)
	}
	if locs[1].URI != "file:///usr/lib/os-release" {
		t.Errorf("outside location %+v: want its absolute path", locs[1])
	}
	// The asked file itself denied: refused, not answered.
	f.files.deny["a.fk"] = true
	if _, _, err := f.run("get_definition", map[string]any{"file_path": "a.fk", "line": 1, "character": 1}); !errors.Is(err, agent.ErrDenied) {
		t.Errorf("denied file: %v", err)
	}
}

func TestDiagnostics(t *testing.T) {
	for _, pull := range []string{"0", "1"} {
		t.Run("pull="+pull, func(t *testing.T) {
			f := newFixture(t, map[string]string{"FAKE_PULL": pull}, nil)
			f.write("a.fk", "ok\n\té🎉 ERR\n")
			var ds []Diagnostic
			_ = json.Unmarshal(f.must("get_diagnostics", map[string]any{"file_path": "a.fk"}), &ds)
			if len(ds) != 1 || ds[0].Range != (Span{Pos{2, 5}, Pos{2, 8}}) || ds[0].Severity != 1 {
				t.Fatalf("diagnostics %+v", ds)
			}
			f.write("a.fk", "ERR ERR\nERR\n")
			_ = json.Unmarshal(f.must("get_diagnostics", map[string]any{"file_path": "a.fk"}), &ds)
			if len(ds) != 2 {
				t.Fatalf("after change: %+v", ds)
			}
			var cached struct {
				FilePath    string             `json:"file_path"`
				Diagnostics []cachedDiagnostic `json:"diagnostics"`
			}
			_ = json.Unmarshal(f.must("get_cached_diagnostics", map[string]any{"file_path": "a.fk"}), &cached)
			if cached.FilePath != "a.fk" || len(cached.Diagnostics) != 2 || cached.Diagnostics[0].Severity != "error" {
				t.Errorf("cached %+v", cached)
			}
		})
	}
	t.Run("cached without a server", func(t *testing.T) {
		f := newFixture(t, nil, nil)
		f.write("a.fk", "ERR\n")
		res := f.must("get_cached_diagnostics", map[string]any{"file_path": "a.fk"})
		if string(res) != `{"file_path":"a.fk","diagnostics":[]}` || len(f.m.Status()) != 0 {
			t.Errorf("got %s and servers %v; want empty and none started", res, f.m.Status())
		}
	})
}

func TestCrashRestartsWithBackoff(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.write("a.fk", "Sym\n")
	f.hover("a.fk", 1, 1)
	for i := range 3 {
		pid := f.m.Status()[0].PID
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for range 500 {
			if st := f.m.Status(); len(st) == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		h := f.hover("a.fk", 1, 1) // restarted (after the backoff from the 2nd crash on) and answering
		if h.Word != "Sym" || h.Opens != 1 {
			t.Fatalf("crash %d: after restart %+v", i+1, h)
		}
		if st := f.m.Status(); len(st) != 1 || st[0].PID == pid {
			t.Fatalf("crash %d: status %+v, want a new process", i+1, st)
		}
	}
	var logs struct{ Logs []logEntry }
	_ = json.Unmarshal(f.must("get_server_logs", map[string]any{"min_level": "error"}), &logs)
	if len(logs.Logs) != 3 || !strings.Contains(logs.Logs[0].Message, "exited unexpectedly") {
		t.Errorf("error logs %+v", logs.Logs)
	}
	f.m.mu.Lock()
	crashes := f.m.slots["Fake"].crashes
	f.m.mu.Unlock()
	if crashes != 3 {
		t.Errorf("crashes counted: %d", crashes)
	}
}

// A call made the moment after the server died (its pipes closed, its process not yet
// reaped) is answered by a fresh server, not failed against the dead one.
func TestCallRightAfterKillIsAnswered(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.write("a.fk", "Sym\n")
	f.hover("a.fk", 1, 1)
	pid := f.m.Status()[0].PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if h := f.hover("a.fk", 1, 1); h.Word != "Sym" {
		t.Fatalf("hover right after the kill = %+v", h)
	}
	if st := f.m.Status(); len(st) != 1 || st[0].PID == pid {
		t.Fatalf("status %+v, want a new process", st)
	}
}

func TestIdleStop(t *testing.T) {
	f := newFixture(t, nil, func(c *Config) { c.IdleTimeout = 100 * time.Millisecond; c.StopGrace = time.Second })
	f.write("a.fk", "Sym\n")
	f.hover("a.fk", 1, 1)
	pid := f.m.Status()[0].PID
	for i := 0; len(f.m.Status()) > 0; i++ {
		if i > 500 {
			t.Fatal("idle server not stopped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := 0; syscall.Kill(pid, 0) == nil; i++ {
		if i > 500 {
			t.Fatal("idle server's process still there")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if h := f.hover("a.fk", 1, 1); h.Opens != 1 {
		t.Errorf("after idle stop: %+v", h)
	}
}

func TestBoundedBuffers(t *testing.T) {
	f := newFixture(t, nil, func(c *Config) { c.Buffered = 5 })
	var b strings.Builder
	for i := range 8 {
		fmt.Fprintf(&b, "log:%d l%d\nshow:3 s%d\n", 1+i%4, i, i)
	}
	f.write("a.fk", b.String())
	f.hover("a.fk", 1, 1)
	var logs struct{ Logs []logEntry }
	for range 200 { // the notifications arrive asynchronously
		_ = json.Unmarshal(f.must("get_server_logs", map[string]any{"limit": 100}), &logs)
		if n := len(logs.Logs); n > 0 && logs.Logs[n-1].Message == "l7" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(logs.Logs) != 5 {
		t.Fatalf("kept %d log entries, want the buffer's 5: %+v", len(logs.Logs), logs.Logs)
	}
	_ = json.Unmarshal(f.must("get_server_logs", map[string]any{"limit": 2}), &logs)
	if len(logs.Logs) != 2 || logs.Logs[0].Message != "l6" || logs.Logs[1].Message != "l7" {
		t.Errorf("limit 2: %+v", logs.Logs)
	}
	// l3..l7 are kept, of types 4,1,2,3,4: debug, error, warning, info, debug.
	_ = json.Unmarshal(f.must("get_server_logs", map[string]any{"min_level": "warning"}), &logs)
	if len(logs.Logs) != 2 || logs.Logs[0].Level != "error" || logs.Logs[1].Level != "warning" {
		t.Errorf("min_level warning: %+v", logs.Logs)
	}
	if _, _, err := f.run("get_server_logs", map[string]any{"min_level": "loud"}); !errors.Is(err, agent.ErrInvalid) {
		t.Errorf("bad min_level: %v", err)
	}
	var msgs struct{ Messages []message }
	_ = json.Unmarshal(f.must("get_server_messages", map[string]any{}), &msgs)
	if len(msgs.Messages) != 5 || msgs.Messages[4].Message != "s7" || msgs.Messages[4].Type != "info" {
		t.Errorf("messages: %+v", msgs.Messages)
	}
}

func TestMissingServerAnswersAtOnce(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "a.py"), []byte("x = 1\n"), 0o644)
	m := New(Config{Root: root, Path: t.TempDir()})
	defer m.Close()
	start := time.Now()
	_, _, err := m.Run(context.Background(), "get_hover", json.RawMessage(`{"file_path":"a.py","line":1,"character":1}`), diskFiles{root: root})
	if !errors.Is(err, agent.ErrUnsupported) || !strings.Contains(err.Error(), "no language server for Python in this image") ||
		!strings.Contains(err.Error(), "install pyright (npm) or python3-pylsp") {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("took %s", time.Since(start))
	}
	_, _, err = m.Run(context.Background(), "get_hover", json.RawMessage(`{"file_path":"a.rs","line":1,"character":1}`), diskFiles{root: root})
	if !errors.Is(err, agent.ErrUnsupported) || !strings.Contains(err.Error(), ".rs") {
		t.Errorf("unknown extension: %v", err)
	}
}

func TestArgumentErrors(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.write("a.fk", "one\ntwo\n")
	_, _, err := f.run("get_hover", map[string]any{"file_path": "a.fk", "line": 9, "character": 1})
	var we *agent.WireError
	if !errors.As(err, &we) || we.Code != agent.CodeInvalid || string(we.Data) != `{"line":{"min":1,"max":3}}` {
		t.Errorf("line out of range: %v %s", err, we.Data)
	}
	_, _, err = f.run("get_hover", map[string]any{"file_path": "a.fk", "line": 1})
	if !errors.Is(err, agent.ErrInvalid) {
		t.Errorf("missing character: %v", err)
	}
	if _, _, err := f.run("no_such_tool", nil); !errors.Is(err, agent.ErrInvalid) {
		t.Errorf("unknown tool: %v", err)
	}
	if _, _, err := f.run("get_hover", map[string]any{"file_path": "gone.fk", "line": 1, "character": 1}); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("missing file: %v", err)
	}
}

func TestCloseKillsServers(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.write("a.fk", "x\n")
	f.hover("a.fk", 1, 1)
	pid := f.m.Status()[0].PID
	f.m.Close()
	if syscall.Kill(pid, 0) == nil {
		t.Errorf("server %d still running after Close", pid)
	}
	if _, _, err := f.run("get_hover", map[string]any{"file_path": "a.fk", "line": 1, "character": 1}); err == nil {
		t.Error("a call after Close succeeded")
	}
}
