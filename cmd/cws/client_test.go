package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/api"
	"github.com/cwsdev/cws/api/mcp"
	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/egress"
	"github.com/cwsdev/cws/metrics"
	"github.com/cwsdev/cws/sandbox/sandboxtest"
	"github.com/cwsdev/cws/secrets"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
	"github.com/prometheus/client_golang/prometheus"
)

// testSecret is the dev tenant's HS256 secret, so a tenants file can mint for it too.
const testSecret = "client-test-secret-0123456789abcdef"

// testServer is the real router over an in-process sandbox, as cws serve builds it
// with Docker swapped for sandboxtest.
type testServer struct {
	url   string
	token string
}

func newTestServer(t *testing.T) *testServer {
	t.Helper()
	tenants, err := auth.DevTenants([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	pols := policy.ByTenant{auth.DevTenantID: policy.Default()}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{Version: "test", Commit: "test"})
	key, _ := secrets.ParseKey(strings.Repeat("07", 32))
	ca, _, err := egress.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: memstore.New(), Sandboxes: sandboxtest.New(t), Tenants: pols,
		Observer: m, DefaultImage: "test-image", PolicyTTL: time.Nanosecond, SecretsKey: key, Egress: &egress.Proxy{CA: ca}})
	t.Cleanup(svc.Close)
	verifier := auth.NewVerifier(tenants, auth.VerifierOptions{})
	hs := httptest.NewUnstartedServer(nil)
	hs.Start()
	t.Cleanup(hs.Close)
	mh := mcp.New(mcp.Config{Service: svc, Verifier: verifier, Tenants: pols})
	hs.Config.Handler = api.New(api.Config{Service: svc, Verifier: verifier, MCP: mh, Metrics: m, Gatherer: reg,
		PublicURL: hs.URL, Issuers: tenants.Issuers()})
	tok, err := tenants.Get(auth.DevTenantID).Mint("alice", time.Hour, "", nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &testServer{url: hs.URL, token: tok}
}

// cli runs the cws command line against the server with env as its environment
// (CWS_SERVER and CWS_TOKEN are preset).
func (s *testServer) cli(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	e := map[string]string{"CWS_SERVER": s.url, "CWS_TOKEN": s.token}
	for k, v := range env {
		e[k] = v
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	err = run(ctx, args, func(k string) string { return e[k] }, &out, &errOut)
	return out.String(), errOut.String(), err
}

// ok runs the command line, which must succeed, and returns its stdout.
func (s *testServer) ok(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := s.cli(t, nil, args...)
	if err != nil {
		t.Fatalf("cws %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// fails runs the command line, which must fail, and returns its error text.
func (s *testServer) fails(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	out, _, err := s.cli(t, env, args...)
	if err == nil {
		t.Fatalf("cws %s succeeded, want an error; stdout: %s", strings.Join(args, " "), out)
	}
	return err.Error()
}

func wantContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s = %q, want it to contain %q", what, got, w)
		}
	}
}

// create makes a session and returns its id.
func (s *testServer) create(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(s.ok(t, "sessions", "create"))
}

func TestClientSessions(t *testing.T) {
	s := newTestServer(t)

	out, errOut, err := s.cli(t, nil, "sessions", "create", "--ttl", "10m", "--label", "job=42", "-o", "json")
	if err != nil {
		t.Fatalf("create: %v (%s)", err, errOut)
	}
	wantContains(t, "create stderr", errOut, "creating session… done in")
	var v api.SessionView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("create -o json: %v\n%s", err, out)
	}
	if !strings.HasPrefix(v.ID, "s-") || v.Labels["job"] != "42" || v.Subject != "alice" {
		t.Errorf("created %+v, want an s- id, label job=42, sub alice", v)
	}
	if left := time.Until(v.IdleUntil); left < 9*time.Minute || left > 10*time.Minute {
		t.Errorf("idle until in %s, want about 10m", left)
	}
	id2 := s.create(t)

	list := s.ok(t, "sessions", "list")
	wantContains(t, "list", list, "ID", "IMAGE", "STATE", "CREATED", "IDLE UNTIL", "SUB", v.ID, id2, "test-image", "alice", "in 9m")
	if got, want := s.ok(t, "sessions", "ls", "-q"), v.ID+"\n"+id2+"\n"; got != want {
		t.Errorf("list -q = %q, want %q", got, want)
	}
	var sl api.SessionList
	if err := json.Unmarshal([]byte(s.ok(t, "sessions", "list", "-o", "json")), &sl); err != nil || sl.Count != 2 {
		t.Errorf("list -o json: %v, count %d, want 2", err, sl.Count)
	}

	wantContains(t, "get", s.ok(t, "sessions", "get", v.ID), "ID:", v.ID, "Labels:", "job=42", "MCP URL:", "/v1/sessions/"+v.ID+"/mcp")
	var got api.SessionView
	if err := json.Unmarshal([]byte(s.ok(t, "sessions", "get", v.ID, "-o", "json")), &got); err != nil || got.ID != v.ID {
		t.Errorf("get -o json: %v, id %q", err, got.ID)
	}
	wantContains(t, "renew", s.ok(t, "sessions", "renew", v.ID), v.ID+" idle until", "(in 9m)")

	if got := s.ok(t, "sessions", "delete", v.ID, id2); got != v.ID+"\n"+id2+"\n" {
		t.Errorf("delete printed %q", got)
	}
	msg := s.fails(t, nil, "sessions", "get", v.ID)
	wantContains(t, "get after delete", msg, "not found (not_found)", "Hint: list sessions with `cws sessions list`")
	msg = s.fails(t, nil, "sessions", "delete", v.ID, "s-nope")
	wantContains(t, "delete missing", msg, v.ID+": not found", "s-nope: not found")
	if got := s.ok(t, "sessions", "list", "-q"); got != "" {
		t.Errorf("list after delete = %q, want nothing", got)
	}
}

func TestClientCall(t *testing.T) {
	s := newTestServer(t)
	id := s.create(t)

	out := s.ok(t, "call", id, "writeFile", "--arg", "path=dir/hello.txt", "--arg", "contents=hi there\n")
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil || res["path"] != "dir/hello.txt" {
		t.Errorf("writeFile printed %q (%v)", out, err)
	}
	if got := s.ok(t, "call", id, "readFile", "--arg", "path=dir/hello.txt", "-o", "raw"); got != "hi there\n" {
		t.Errorf("readFile -o raw = %q", got)
	}
	var full struct {
		Result  map[string]any `json:"result"`
		IsError bool           `json:"isError"`
	}
	out = s.ok(t, "call", id, "readFile", "--json", `{"path":"dir/hello.txt"}`, "-o", "json")
	if err := json.Unmarshal([]byte(out), &full); err != nil || full.IsError || full.Result["content"] != "hi there\n" {
		t.Errorf("readFile -o json = %s (%v)", out, err)
	}
	argsFile := filepath.Join(t.TempDir(), "args.json")
	os.WriteFile(argsFile, []byte(`{"path":"dir","options":{}}`), 0o644)
	wantContains(t, "listFiles", s.ok(t, "call", id, "listFiles", "--json", "@"+argsFile, "--arg", "options.recursive=true"), `"hello.txt"`)

	// A failure the tool reports: exit 1 with its message.
	msg := s.fails(t, nil, "call", id, "readFile", "--arg", "path=missing.txt")
	wantContains(t, "missing file", msg, "readFile failed:", "(not_found)")
	_, _, err := s.cli(t, nil, "call", id, "readFile", "--arg", "path=missing.txt", "-o", "json")
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Errorf("readFile missing -o json: err %v, want exit 1", err)
	}
	// runCommand -o raw passes the output through and exits with the command's code.
	out, errOut, err := s.cli(t, nil, "call", id, "runCommand", "--arg", "command=sh", "--arg", `args=["-c","echo out; echo err >&2; exit 3"]`, "-o", "raw")
	if !errors.As(err, &ee) || ee.code != 3 || out != "out\n" || errOut != "err\n" {
		t.Errorf("runCommand -o raw: err %v, stdout %q, stderr %q; want exit 3, out, err", err, out, errOut)
	}

	// Refusals by the server show their code, rpc code and a hint.
	msg = s.fails(t, nil, "call", id, "readFile", "--arg", "path=../../etc/passwd")
	wantContains(t, "traversal", msg, "(path_traversal, rpc -32001)", "Hint:")
	msg = s.fails(t, nil, "call", id, "writeFile", "--arg", "path="+policy.FileName, "--arg", "contents=x")
	wantContains(t, "policy", msg, "(policy_violation, rpc -32002)", `rule protected`, "Hint: the tenant's policy")
	// JSON-looking text goes in through --json (as --arg it would be an object).
	s.ok(t, "call", id, "writeFile", "--json", `{"path":"p.json","contents":"{\"a\":1}"}`)
	if got := s.ok(t, "call", id, "readFile", "--arg", "path=p.json", "-o", "raw"); got != `{"a":1}` {
		t.Errorf("p.json = %q", got)
	}
	msg = s.fails(t, nil, "call", id, "writeFile", "--arg", "path=q.json", "--arg", "contents={}")
	wantContains(t, "object for a string", msg, "must be string", "(invalid_params, rpc -32602)", "quote it as a JSON string")
	msg = s.fails(t, nil, "call", id, "noSuchTool")
	wantContains(t, "unknown tool", msg, `unknown tool "noSuchTool"`, "(invalid_params, rpc -32602)")
}

func TestToolArgs(t *testing.T) {
	tests := []struct {
		name, json string
		args       []string
		want       string
		wantErr    string
	}{
		{name: "strings and JSON", args: []string{"path=a.txt", "n=42", "ok=true", "list=[1,\"x\"]", "s=\"42\""},
			want: `{"list":[1,"x"],"n":42,"ok":true,"path":"a.txt","s":"42"}`},
		{name: "nesting", args: []string{"options.recursive=true", "options.depth=2", "a.b.c=x"},
			want: `{"a":{"b":{"c":"x"}},"options":{"depth":2,"recursive":true}}`},
		{name: "over --json", json: `{"path":"a","options":{"x":1}}`, args: []string{"options.y=2", "path=b"},
			want: `{"options":{"x":1,"y":2},"path":"b"}`},
		{name: "value with =", args: []string{"contents=a=b"}, want: `{"contents":"a=b"}`},
		{name: "no args", want: `{}`},
		{name: "not key=value", args: []string{"path"}, wantErr: "want key=value"},
		{name: "into a scalar", args: []string{"a=1", "a.b=2"}, wantErr: "a is already set"},
		{name: "empty part", args: []string{"a..b=1"}, wantErr: "empty key part"},
		{name: "json not an object", json: `[1]`, wantErr: "want a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := toolArgs(tt.json, tt.args, strings.NewReader(""))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Errorf("toolArgs = %s, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestClientUploadDownload(t *testing.T) {
	s := newTestServer(t)
	id := s.create(t)

	src := t.TempDir()
	files := map[string]string{"README.md": "# hi\n", "src/main.go": "package main\n", "src/deep/er/x.txt": strings.Repeat("x", 100_000)}
	for name, content := range files {
		p := filepath.Join(src, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("main.go", filepath.Join(src, "src", "link.go"))

	out, errOut, err := s.cli(t, nil, "upload", id, src, "--progress")
	if err != nil {
		t.Fatalf("upload: %v (%s)", err, errOut)
	}
	wantContains(t, "upload", out, "uploaded 4 files and 3 directories")
	wantContains(t, "upload progress", errOut, "sent in")

	dst := t.TempDir()
	wantContains(t, "download -C", s.ok(t, "download", id, "-C", dst), "extracted", "into "+dst)
	for name, content := range files {
		got, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || string(got) != content {
			t.Errorf("%s after round trip: %v, %d bytes, want %d", name, err, len(got), len(content))
		}
	}
	if target, err := os.Readlink(filepath.Join(dst, "src", "link.go")); err != nil || target != "main.go" {
		t.Errorf("src/link.go: %q, %v; want a link to main.go", target, err)
	}

	// -O writes the archive; stdout gets it when no file is named.
	tarFile := filepath.Join(t.TempDir(), "ws.tar")
	s.ok(t, "download", id, "-O", tarFile)
	data, err := os.ReadFile(tarFile)
	if err != nil {
		t.Fatal(err)
	}
	names := tarNames(t, data)
	wantContains(t, "archive", strings.Join(names, " "), "README.md", "src/main.go", "src/deep/er/x.txt")
	if got := s.ok(t, "download", id); got != string(data) {
		t.Errorf("download to stdout: %d bytes, want the %d of -O", len(got), len(data))
	}

	// A tar file uploads as it is.
	s.ok(t, "call", id, "deleteFile", "--arg", "path=src", "--arg", "recursive=true")
	wantContains(t, "upload tar", s.ok(t, "upload", id, tarFile), "uploaded 4 files and 3 directories")
	if got := s.ok(t, "call", id, "readFile", "--arg", "path=src/main.go", "-o", "raw"); got != "package main\n" {
		t.Errorf("src/main.go after tar upload = %q", got)
	}
}

func tarNames(t *testing.T, data []byte) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatalf("archive: %v", err)
		}
		names = append(names, h.Name)
	}
}

func TestClientDiffNotGit(t *testing.T) {
	s := newTestServer(t)
	id := s.create(t)
	msg := s.fails(t, nil, "diff", id)
	wantContains(t, "diff", msg, "(invalid_params", "git")
}

func TestClientErrors(t *testing.T) {
	s := newTestServer(t)

	msg := s.fails(t, map[string]string{"CWS_TOKEN": "not-a-jwt"}, "sessions", "list")
	wantContains(t, "bad token", msg, "(unauthorized)", "Hint: check --token / CWS_TOKEN")

	msg = s.fails(t, map[string]string{"CWS_TOKEN": ""}, "sessions", "list")
	wantContains(t, "no token", msg, "no token", "--token", "CWS_TOKEN")

	closed := httptest.NewServer(nil)
	closed.Close()
	msg = s.fails(t, map[string]string{"CWS_SERVER": closed.URL}, "sessions", "list")
	wantContains(t, "refused", msg, "cannot reach cws at "+closed.URL, "start it with `cws serve --dev`")

	// The server refuses an upload before reading it: the refusal, not a broken pipe.
	big := t.TempDir()
	os.WriteFile(filepath.Join(big, "big"), bytes.Repeat([]byte("x"), 4<<20), 0o644)
	msg = s.fails(t, nil, "upload", "s-nope", big)
	wantContains(t, "upload to a missing session", msg, "not found (not_found)", "cws sessions list")

	msg = s.fails(t, nil, "sessions", "list", "-o", "yaml")
	wantContains(t, "bad -o", msg, `-o "yaml": want one of table, json`)
}

func TestClientMintsToken(t *testing.T) {
	s := newTestServer(t)
	dir := t.TempDir()
	tenants := filepath.Join(dir, "tenants.yaml")
	os.WriteFile(tenants, []byte(`tenants:
  - id: dev
    issuer: cws-dev
    keys:
      - {kid: dev, alg: HS256, secret: `+testSecret+`}
`), 0o600)
	env := map[string]string{"CWS_TOKEN": ""}
	out, errOut, err := s.cli(t, env, "sessions", "create", "--tenants", tenants, "--tenant", "dev", "--sub", "bob", "-o", "json")
	if err != nil {
		t.Fatalf("create with a minted token: %v (%s)", err, errOut)
	}
	wantContains(t, "created", out, `"sub": "bob"`)
}

func TestExtractRefusesEscapes(t *testing.T) {
	archive := func(entries ...tar.Header) io.Reader {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range entries {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeReg {
				h.Size = 1
			}
			tw.WriteHeader(&h)
			if h.Typeflag == tar.TypeReg {
				tw.Write([]byte("x"))
			}
		}
		tw.Close()
		return &buf
	}
	for _, name := range []string{"../evil", "a/../../evil", "/etc/evil"} {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "out")
			_, err := extractTar(archive(tar.Header{Name: name, Typeflag: tar.TypeReg}), dir, io.Discard)
			if err == nil || !strings.Contains(err.Error(), "refusing archive entry") {
				t.Errorf("err = %v, want a refusal", err)
			}
			if _, err := os.Stat(filepath.Join(parent, "evil")); err == nil {
				t.Error("evil was written outside the directory")
			}
		})
	}
	t.Run("symlink out, then a file through it", func(t *testing.T) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "out")
		var warn bytes.Buffer
		n, err := extractTar(archive(
			tar.Header{Name: "up", Typeflag: tar.TypeSymlink, Linkname: ".."},
			tar.Header{Name: "abs", Typeflag: tar.TypeSymlink, Linkname: "/etc"},
			tar.Header{Name: "ok", Typeflag: tar.TypeSymlink, Linkname: "sub/f"},
			tar.Header{Name: "sub/f", Typeflag: tar.TypeReg},
		), dir, &warn)
		if err != nil || n != 2 {
			t.Fatalf("extract: %d entries, %v; want 2", n, err)
		}
		wantContains(t, "warnings", warn.String(), "skipping symlink up -> ..", "skipping symlink abs -> /etc")
		if _, err := os.Lstat(filepath.Join(dir, "up")); err == nil {
			t.Error("the escaping symlink was created")
		}
	})
	t.Run("truncated", func(t *testing.T) {
		var buf bytes.Buffer
		io.Copy(&buf, archive(tar.Header{Name: "f", Typeflag: tar.TypeReg}))
		// Cut inside an entry, and between entries (where archive/tar sees a clean EOF).
		for _, cut := range []int{600, 1024} {
			short := func() io.Reader { return io.MultiReader(bytes.NewReader(buf.Bytes()[:cut])) } // not a Seeker, like a response body
			if _, err := extractTar(short(), t.TempDir(), io.Discard); !errors.Is(err, errTruncated) {
				t.Errorf("extract cut at %d: %v, want truncated", cut, err)
			}
			if err := copyTar(io.Discard, short()); !errors.Is(err, errTruncated) {
				t.Errorf("copy cut at %d: %v, want truncated", cut, err)
			}
		}
		if err := copyTar(io.Discard, bytes.NewReader(buf.Bytes())); err != nil {
			t.Errorf("copy whole: %v", err)
		}
	})
}

func TestDoctorBrokenPolicy(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock") // fail fast, the same on every machine
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "good.json"), []byte(`{"deniedPaths":[".env"]}`), 0o644)
	os.WriteFile(filepath.Join(dir, "broken.json"), []byte(`{"deniedPaths": [".env"`), 0o644)
	tenants := filepath.Join(dir, "tenants.yaml")
	os.WriteFile(tenants, []byte(`tenants:
  - id: acme
    issuer: https://acme.example
    keys: [{kid: k1, alg: HS256, secret: acme-secret-0123456789abcdef0123456789}]
    policy: good.json
  - id: globex
    issuer: https://globex.example
    keys: [{kid: k2, alg: HS256, secret: globex-secret-0123456789abcdef01234567}]
    policy: broken.json
`), 0o600)
	closed := httptest.NewServer(nil)
	closed.Close()

	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"doctor", "--tenants", tenants, "--server", closed.URL, "--agent-binary", tenants},
		func(string) string { return "" }, &out, &errOut)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Errorf("doctor: err %v, want exit 1", err)
	}
	got := out.String()
	wantContains(t, "doctor", got,
		"✘ Docker engine at unix:///nonexistent/docker.sock", "make deps",
		"✔ tenants file "+tenants+": 2 tenant(s)",
		"✔ tenant acme: policy "+filepath.Join(dir, "good.json"),
		"✘ tenant globex: policy "+filepath.Join(dir, "broken.json"), "→ fix "+filepath.Join(dir, "broken.json"),
		"- cws at "+closed.URL+": not answering",
		"check(s) failed")
}

// TestClientSecrets: set (from a file, never printed), list (no value), a session
// created with --secret shows it by name, delete; a missing --host and a token without
// the scope are clear errors.
func TestClientSecrets(t *testing.T) {
	s := newTestServer(t)
	tenants, _ := auth.DevTenants([]byte(testSecret))
	tok, err := tenants.Get(auth.DevTenantID).Mint("alice", time.Hour, "", append(auth.AllScopes(), auth.ScopeSecrets), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"CWS_TOKEN": tok}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("ghp_CLIVALUE\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := s.cli(t, env, "secrets", "set", "gh-token", "--host", "github.com", "--host", "*.github.com", "--from-file", file)
	if err != nil || strings.TrimSpace(out) != "gh-token" || strings.Contains(out+errOut, "ghp_") {
		t.Fatalf("set: %q %q %v", out, errOut, err)
	}
	out, _, err = s.cli(t, env, "secrets", "list")
	if err != nil || !strings.Contains(out, "gh-token") || !strings.Contains(out, "github.com,*.github.com") || strings.Contains(out, "ghp_") {
		t.Errorf("list: %q %v", out, err)
	}
	out, _, err = s.cli(t, env, "sessions", "create", "--secret", "GITHUB_TOKEN=gh-token", "-o", "json")
	if err != nil || !strings.Contains(out, `"GITHUB_TOKEN": "gh-token"`) {
		t.Errorf("create --secret: %q %v", out, err)
	}
	wantContains(t, "set without --host", s.fails(t, env, "secrets", "set", "x", "--from-file", file), "--host")
	wantContains(t, "list without the scope", s.fails(t, nil, "secrets", "list"), "secrets")
	wantContains(t, "create --secret unknown", s.fails(t, env, "sessions", "create", "--secret", "X=nope"), `unknown secret "nope"`)
	if out, _, err := s.cli(t, env, "secrets", "delete", "gh-token"); err != nil || strings.TrimSpace(out) != "gh-token" {
		t.Errorf("delete: %q %v", out, err)
	}
}
