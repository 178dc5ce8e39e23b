package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/version"
)

// runArgs run a container of the default image the way cws does: read-only root, tmpfs
// /tmp (with cws's options, so noexec), uid 1000 with HOME=/tmp, no network.
func runArgs(extra ...string) []string {
	args := []string{"run", "--rm", "--read-only", "--tmpfs", "/tmp:rw,nosuid,nodev,size=268435456",
		"-u", "1000", "-e", "HOME=/tmp", "--network", "none"}
	return append(append(args, extra...), version.WorkspaceImage)
}

func needWorkspaceImage(t *testing.T) {
	t.Helper()
	testenv.Docker(t)
	_, err := command{timeout: time.Minute}.run(t.Context(), "docker", "image", "inspect", version.WorkspaceImage)
	testenv.RequireCI(t, version.WorkspaceImage+" (make images)", err)
}

// TestWorkspaceImageTools checks that every tool and language server of the default
// image starts in a cws-like container and reports its version, and that the Go
// environment points every cache at /tmp and never reaches for the network.
func TestWorkspaceImageTools(t *testing.T) {
	needWorkspaceImage(t)
	script := `
v() { printf '%s: ' "$1"; shift; "$@" 2>&1 | head -n 1; }
v gopls gopls version
v go go version
v gofmt sh -c 'echo "package x" | gofmt'
v node node --version
v pyright pyright --version
v tsls typescript-language-server --version
v tsc tsc --version
v git git --version
v rg rg --version
v python3 python3 --version
v ps ps --version
if command -v clangd >/dev/null; then v clangd clangd --version; else echo "clangd: absent"; fi
go env -json GOTOOLCHAIN GOPATH GOCACHE GOMODCACHE GOPROXY GOROOT
`
	out := command{timeout: 2 * time.Minute}.must(t, "docker", append(runArgs(), "sh", "-c", script)...)
	got := map[string]string{}
	var envJSON strings.Builder
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t") {
			got[k] = v
		} else {
			envJSON.WriteString(line)
		}
	}
	want := map[string]string{
		"gopls":   "golang.org/x/tools/gopls v0.",
		"go":      "go version go1.",
		"gofmt":   "package x",
		"node":    "v18.",
		"pyright": "pyright 1.1.",
		"tsls":    "4.",
		"tsc":     "Version 5.",
		"git":     "git version 2.",
		"rg":      "ripgrep ",
		"python3": "Python 3.",
		"ps":      "ps from procps",
	}
	for k, prefix := range want {
		if !strings.HasPrefix(got[k], prefix) {
			t.Errorf("%s: got %q, want prefix %q", k, got[k], prefix)
		} else {
			t.Logf("%-8s %s", k, got[k])
		}
	}
	if c := got["clangd"]; c != "absent" && !strings.Contains(c, "clangd version") {
		t.Errorf("clangd: got %q", c)
	} else {
		t.Logf("%-8s %s", "clangd", c)
	}
	var env map[string]string
	if err := json.Unmarshal([]byte(envJSON.String()), &env); err != nil {
		t.Fatalf("go env -json: %v\n%s", err, out)
	}
	for k, v := range map[string]string{
		"GOTOOLCHAIN": "local", "GOPATH": "/tmp/go", "GOCACHE": "/tmp/.cache/go-build",
		"GOMODCACHE": "/tmp/go/pkg/mod", "GOPROXY": "off", "GOROOT": "/usr/local/go",
	} {
		if env[k] != v {
			t.Errorf("go env %s = %q, want %q", k, env[k], v)
		}
	}
}

// TestWorkspaceImageLanguageServers speaks LSP over stdio to each language server in a
// cws-like container (no network, read-only root): initialize, open a tiny project
// written to /tmp, and ask for the definition of a call, which must land on the
// function's declaration. gopls runs with GOPROXY=off and GOFLAGS=-mod=mod on a
// stdlib-only module.
func TestWorkspaceImageLanguageServers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts language servers in containers; skipped with -short")
	}
	needWorkspaceImage(t)
	cases := []struct {
		name, cmd, lang, file, src string
		env                        []string
		line, char, wantLine       int  // 0-based LSP positions
		optional                   bool // not in the default image (CWS_WITH_CLANGD=1)
	}{
		{
			name: "gopls", cmd: "gopls", lang: "go", file: "main.go",
			env: []string{"GOFLAGS=-mod=mod"},
			src: "package main\n\nimport \"strings\"\n\nfunc greet(s string) string { return strings.ToUpper(s) }\n\n" +
				"func main() { println(greet(\"hi\")) }\n",
			line: 6, char: 22, wantLine: 4,
		},
		{
			name: "pyright", cmd: "pyright-langserver --stdio", lang: "python", file: "a.py",
			src:  "def greet(s):\n    return s.upper()\n\n\nprint(greet(\"hi\"))\n",
			line: 4, char: 6, wantLine: 0,
		},
		{
			name: "typescript-language-server", cmd: "typescript-language-server --stdio", lang: "typescript", file: "a.ts",
			src:  "function greet(s: string): string {\n  return s.toUpperCase();\n}\nconsole.log(greet(\"hi\"));\n",
			line: 3, char: 12, wantLine: 0,
		},
		{
			name: "clangd", cmd: "clangd", lang: "c", file: "a.c", optional: true,
			src:  "#include <stdio.h>\n\nstatic int twice(int x) { return 2 * x; }\n\nint main(void) { printf(\"%d\\n\", twice(2)); }\n",
			line: 4, char: 37, wantLine: 2,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.optional {
				if _, err := (command{timeout: time.Minute}).run(t.Context(), "docker", append(runArgs(), "sh", "-c", "command -v "+tc.cmd)...); err != nil {
					t.Skipf("%s is not in %s (optional)", tc.cmd, version.WorkspaceImage)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			extra := []string{"-i", "-e", "SRC=" + tc.src}
			for _, e := range tc.env {
				extra = append(extra, "-e", e)
			}
			setup := "mkdir -p /tmp/p && cd /tmp/p && printf '%s' \"$SRC\" >" + tc.file
			if tc.lang == "go" {
				setup += " && go mod init example.com/p >/dev/null 2>&1"
			}
			args := append(runArgs(extra...), "sh", "-c", setup+" && exec "+tc.cmd)
			c := startLSP(ctx, t, args)
			t0 := time.Now()
			var init struct {
				Capabilities struct {
					DefinitionProvider any `json:"definitionProvider"`
				} `json:"capabilities"`
				ServerInfo struct{ Name, Version string } `json:"serverInfo"`
			}
			c.call(t, "initialize", map[string]any{
				"processId": nil, "rootUri": "file:///tmp/p",
				"workspaceFolders": []any{map[string]any{"uri": "file:///tmp/p", "name": "p"}},
				"capabilities": map[string]any{"textDocument": map[string]any{
					"definition": map[string]any{"linkSupport": false}}},
			}, &init)
			if init.Capabilities.DefinitionProvider == nil || init.Capabilities.DefinitionProvider == false {
				t.Fatalf("initialize: no definitionProvider: %+v", init)
			}
			ver := init.ServerInfo.Version
			if strings.HasPrefix(ver, "{") { // gopls sends its whole build info
				var bi struct{ Version, GoVersion string }
				_ = json.Unmarshal([]byte(ver), &bi)
				ver = bi.Version + " " + bi.GoVersion
			}
			t.Logf("initialized %q %s in %s", init.ServerInfo.Name, ver, time.Since(t0).Round(time.Millisecond))
			c.notify(t, "initialized", map[string]any{})
			uri := "file:///tmp/p/" + tc.file
			c.notify(t, "textDocument/didOpen", map[string]any{"textDocument": map[string]any{
				"uri": uri, "languageId": tc.lang, "version": 1, "text": tc.src}})
			// A server may answer "nothing" while it still loads the project.
			for {
				var locs json.RawMessage
				c.call(t, "textDocument/definition", map[string]any{
					"textDocument": map[string]any{"uri": uri},
					"position":     map[string]any{"line": tc.line, "character": tc.char},
				}, &locs)
				got := definitionLines(t, locs)
				if len(got) > 0 {
					if got[0].uri != uri || got[0].line != tc.wantLine {
						t.Fatalf("definition: got %+v, want %s line %d", got, uri, tc.wantLine)
					}
					t.Logf("definition at %s:%d after %s", got[0].uri, got[0].line, time.Since(t0).Round(time.Millisecond))
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("no definition before the deadline (last %s)", locs)
				}
				time.Sleep(500 * time.Millisecond)
			}
			c.call(t, "shutdown", nil, nil)
			c.notify(t, "exit", nil)
		})
	}
}

type defLoc struct {
	uri  string
	line int
}

// definitionLines decodes a definition result: null, a Location, or a list of
// Locations or LocationLinks.
func definitionLines(t *testing.T, raw json.RawMessage) []defLoc {
	t.Helper()
	type loc struct {
		URI       string `json:"uri"`
		TargetURI string `json:"targetUri"`
		Range     struct {
			Start struct{ Line int } `json:"start"`
		} `json:"range"`
		TargetSelectionRange struct {
			Start struct{ Line int } `json:"start"`
		} `json:"targetSelectionRange"`
	}
	var list []loc
	s := strings.TrimSpace(string(raw))
	switch {
	case s == "" || s == "null":
		return nil
	case strings.HasPrefix(s, "["):
		if err := json.Unmarshal(raw, &list); err != nil {
			t.Fatalf("definition result %s: %v", raw, err)
		}
	default:
		var one loc
		if err := json.Unmarshal(raw, &one); err != nil {
			t.Fatalf("definition result %s: %v", raw, err)
		}
		list = []loc{one}
	}
	var out []defLoc
	for _, l := range list {
		if l.TargetURI != "" {
			out = append(out, defLoc{l.TargetURI, l.TargetSelectionRange.Start.Line})
		} else {
			out = append(out, defLoc{l.URI, l.Range.Start.Line})
		}
	}
	return out
}

// lspConn is a minimal LSP client over a process's stdio. It answers the server's own
// requests (workspace/configuration with nulls, everything else with null) and drops
// notifications.
type lspConn struct {
	mu     sync.Mutex
	w      io.Writer
	nextID int
	msgs   chan lspMsg
	stderr *strings.Builder
}

type lspMsg struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

func startLSP(ctx context.Context, t *testing.T, dockerArgs []string) *lspConn {
	t.Helper()
	cmd := exec.CommandContext(ctx, "docker", dockerArgs...)
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &lspConn{w: stdin, msgs: make(chan lspMsg, 64), stderr: &strings.Builder{}}
	cmd.Stderr = &lockedWriter{b: c.stderr, mu: &c.mu}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
		if t.Failed() {
			c.mu.Lock()
			t.Logf("server stderr:\n%s", c.stderr.String())
			c.mu.Unlock()
		}
	})
	go func() {
		defer close(c.msgs)
		r := bufio.NewReader(stdout)
		for {
			n := -1
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				line = strings.TrimSpace(line)
				if line == "" {
					break
				}
				if v, ok := strings.CutPrefix(strings.ToLower(line), "content-length:"); ok {
					n, _ = strconv.Atoi(strings.TrimSpace(v))
				}
			}
			if n < 0 {
				return
			}
			body := make([]byte, n)
			if _, err := io.ReadFull(r, body); err != nil {
				return
			}
			var m lspMsg
			if json.Unmarshal(body, &m) == nil {
				c.msgs <- m
			}
		}
	}()
	return c
}

type lockedWriter struct {
	b  *strings.Builder
	mu *sync.Mutex
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (c *lspConn) send(t *testing.T, m map[string]any) {
	t.Helper()
	m["jsonrpc"] = "2.0"
	body, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(c.w, "Content-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatalf("write to the server: %v", err)
	}
}

func (c *lspConn) notify(t *testing.T, method string, params any) {
	t.Helper()
	m := map[string]any{"method": method}
	if params != nil {
		m["params"] = params
	}
	c.send(t, m)
}

// call sends a request and waits for its response, decoding the result into out.
func (c *lspConn) call(t *testing.T, method string, params, out any) {
	t.Helper()
	c.nextID++
	id := c.nextID
	m := map[string]any{"id": id, "method": method}
	if params != nil {
		m["params"] = params
	}
	c.send(t, m)
	timeout := time.After(4 * time.Minute)
	for {
		select {
		case <-timeout:
			t.Fatalf("%s: no response in 4m", method)
		case msg, ok := <-c.msgs:
			if !ok {
				t.Fatalf("%s: the server closed its output", method)
			}
			switch {
			case msg.Method != "" && msg.ID != nil: // a request from the server
				var result any
				if msg.Method == "workspace/configuration" {
					var p struct{ Items []any }
					_ = json.Unmarshal(msg.Params, &p)
					result = make([]any, len(p.Items))
				}
				c.send(t, map[string]any{"id": msg.ID, "result": result})
			case msg.Method != "": // a notification
			case string(msg.ID) == strconv.Itoa(id):
				if msg.Error != nil {
					t.Fatalf("%s: error %d %s", method, msg.Error.Code, msg.Error.Message)
				}
				if out != nil && len(msg.Result) > 0 {
					if err := json.Unmarshal(msg.Result, out); err != nil {
						t.Fatalf("%s: result %s: %v", method, msg.Result, err)
					}
				}
				return
			}
		}
	}
}
