package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path"
	"strings"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/sandbox/agent"
)

func init() {
	sections = append(sections, section{
		Name:  "lsp",
		Order: 45,
		Doc:   "gopls through the agent's LSP manager (first answer after an upload: at once and after the background start's 5 s; warm hover/definition/references) vs gopls over stdio in the same container",
		Run:   benchLSP,
	})
	goals = append(goals,
		goal{Order: 46, Figure: "warm LSP hover, p50, vs gopls over stdio", Row: "lsp hover (agent)", Anchor: "lsp hover (gopls stdio)", Slower: 1.2},
		goal{Order: 47, Figure: "warm LSP definition, p50, vs gopls over stdio", Row: "lsp definition (agent)", Anchor: "lsp definition (gopls stdio)", Slower: 1.2},
		goal{Order: 48, Figure: "warm LSP references, p50, vs gopls over stdio", Row: "lsp references (agent)", Anchor: "lsp references (gopls stdio)", Slower: 1.2},
		goal{Order: 49, Figure: "warm LSP hover over MCP, p50, vs gopls over stdio", Row: "lsp hover (MCP)", Anchor: "lsp hover (gopls stdio)", Slower: 1.2},
		goal{Order: 49, Figure: "warm LSP definition over MCP, p50, vs gopls over stdio", Row: "lsp definition (MCP)", Anchor: "lsp definition (gopls stdio)", Slower: 1.2},
		goal{Order: 49, Figure: "warm LSP references over MCP, p50, vs gopls over stdio", Row: "lsp references (MCP)", Anchor: "lsp references (gopls stdio)", Slower: 1.2})
	goals = append(goals, goal{Order: 45, Figure: "first LSP answer 5 s after a Go module's upload, p50",
		Row: lspAfterUpload, Anchor: "lsp first answer (gopls stdio)", MaxP50: time.Second})
}

// lspAfterUpload is the row of the figure: the first hover once the background
// start has had 5 s.
const lspAfterUpload = "lsp first hover 5 s after upload (agent)"

// lspModule is a mid-size Go module under lspbench/ (pkgs × files × funcs functions,
// each calling the one before it across files and packages) as a tar archive, and the
// file and position of a symbol used across it: line and character are 1-based.
func lspModule(pkgs, files, funcs int) ([]byte, string, int, int, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(p, s string) error {
		if err := tw.WriteHeader(&tar.Header{Name: "lspbench/" + p, Mode: 0o644, Size: int64(len(s)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write([]byte(s))
		return err
	}
	if err := add("go.mod", "module example.com/lspbench\n\ngo 1.22\n"); err != nil {
		return nil, "", 0, 0, err
	}
	for p := range pkgs {
		for f := range files {
			var b strings.Builder
			fmt.Fprintf(&b, "package p%d\n\nimport (\n\t\"fmt\"\n\t\"strings\"\n", p)
			if p > 0 {
				fmt.Fprintf(&b, "\n\tprev \"example.com/lspbench/p%d\"\n", p-1)
			}
			b.WriteString(")\n\n")
			for fn := range funcs {
				fmt.Fprintf(&b, "// F%d_%d formats its input (package %d).\nfunc F%d_%d(s string) string {\n", f, fn, p, f, fn)
				switch {
				case fn > 0:
					fmt.Fprintf(&b, "\treturn strings.ToUpper(F%d_%d(s)) + fmt.Sprint(%d)\n}\n\n", f, fn-1, fn)
				case p > 0:
					fmt.Fprintf(&b, "\treturn prev.F%d_%d(s)\n}\n\n", f, funcs-1)
				default:
					b.WriteString("\treturn fmt.Sprintf(\"%q\", s)\n}\n\n")
				}
			}
			if err := add(fmt.Sprintf("p%d/f%d.go", p, f), b.String()); err != nil {
				return nil, "", 0, 0, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", 0, 0, err
	}
	// In p5/f0.go (package, blank, "import (", fmt, strings, blank, prev, ")", blank,
	// comment, func), line 12 is F0_0's body: "\treturn prev.F0_<funcs-1>(s)", a
	// function of p4, a package no warm-up opened a file of.
	return buf.Bytes(), fmt.Sprintf("lspbench/p%d/f0.go", min(5, pkgs-1)), 12, len("\treturn prev.") + 1, nil
}

func benchLSP(ctx context.Context, e *env) ([]bench.Row, error) {
	archive, file, line, char, err := lspModule(8, 10, 20)
	if err != nil {
		return nil, err
	}
	pos, _ := json.Marshal(map[string]any{"file_path": file, "line": line, "character": char})
	agentCall := func(b *box, tool string) func(context.Context) error {
		return func(ctx context.Context) error {
			r, err := b.Client.LSP(ctx, agent.LSPArgs{Tool: tool, Args: pos})
			if err == nil && (len(r.Result) == 0 || string(r.Result) == "null" || string(r.Result) == "[]") {
				err = fmt.Errorf("%s: empty answer", tool)
			}
			return err
		}
	}
	upload := func(ctx context.Context, b *box) error {
		_, err := b.Client.TarIn(ctx, agent.TarInArgs{Path: "."}, bytes.NewReader(archive))
		return err
	}
	// timeFirst makes a fresh sandbox, uploads the module, waits, and times the first
	// hover, definition and references. It keeps the last sandbox for what follows.
	var rows []bench.Row
	var keep *box
	defer func() {
		if keep != nil {
			e.remove(ctx, keep)
		}
	}()
	timeFirst := func(wait time.Duration, names [3]string, note string) error {
		samples := make([][]time.Duration, 3)
		n := e.iterations(3)
		for i := range n {
			b, err := e.newBox(ctx)
			if err != nil {
				return err
			}
			if keep != nil {
				e.remove(ctx, keep)
			}
			keep = b
			if err := upload(ctx, b); err != nil {
				return fmt.Errorf("upload: %w", err)
			}
			time.Sleep(wait)
			for j, tool := range []string{"get_hover", "get_definition", "get_references"} {
				start := time.Now()
				if err := agentCall(b, tool)(ctx); err != nil {
					return fmt.Errorf("first %s: %w", tool, err)
				}
				samples[j] = append(samples[j], time.Since(start))
			}
			e.logf("%s: %v %v %v", note, samples[0][i], samples[1][i], samples[2][i])
		}
		for j, name := range names {
			row := bench.Summarize(name, samples[j])
			row.Note = note
			rows = append(rows, row)
		}
		return nil
	}
	e.logf("lsp: a Go module (8 packages × 10 files × 20 functions) uploaded, then the first answers at once…")
	if err := timeFirst(0, [3]string{"lsp first hover right after upload (agent)", "lsp then first definition (agent)", "lsp then first references (agent)"},
		"fresh sandbox each time: gopls start, module load, then each tool's first call"); err != nil {
		return rows, err
	}
	e.logf("lsp: uploaded, then 5 s for the background start, then the first answers…")
	if err := timeFirst(5*time.Second, [3]string{lspAfterUpload, "lsp then first definition, 5 s after upload (agent)", "lsp then first references, 5 s after upload (agent)"},
		"fresh sandbox each time; the agent warmed gopls after the upload"); err != nil {
		return rows, err
	}
	b := keep
	e.logf("lsp: gopls over stdio (docker exec -i) beside the agent's…")
	direct, err := directGopls(ctx, b.ID)
	if err != nil {
		return rows, fmt.Errorf("gopls stdio: %w", err)
	}
	defer direct.close()
	start := time.Now()
	// The files the agent's gopls has open: the one the warm-up opened (the first source
	// file of the upload, p0/f0.go) and the one asked about. (gopls answers much faster
	// about a symbol of a package it has a file of open, ~1 ms instead of ~10: the symbol
	// asked about is in p4, which neither has open.)
	// Opened as the agent opens it: the workspace root is the folder (the module is in it).
	if err := direct.open(ctx, "/workspace", "/workspace/lspbench/p0/f0.go", "/workspace/"+file); err != nil {
		return rows, err
	}
	p := map[string]any{"textDocument": map[string]string{"uri": "file:///workspace/" + file},
		"position": map[string]int{"line": line - 1, "character": char - 1}}
	var loc []any
	if err := direct.conn.Call(ctx, "textDocument/definition", p, &loc); err != nil || len(loc) == 0 {
		return rows, fmt.Errorf("first definition over stdio: %v (%d locations)", err, len(loc))
	}
	rows = append(rows, bench.Row{Name: "lsp first answer (gopls stdio)", N: 1, Mean: time.Since(start), P50: time.Since(start), P99: time.Since(start),
		Note: "a second gopls, same container, same module, same files open: start, load, definition (gopls's caches already warm)"})
	// The same questions over MCP, as a client outside cws asks them: a session of the
	// real router (JWT, MCP, the lsp toolset), the module uploaded into its sandbox.
	e.logf("lsp: an MCP session with the module uploaded…")
	m, err := newMCPRunner(ctx, e)
	if err != nil {
		return rows, err
	}
	defer m.close(ctx)
	mb := readyBox(e.driver, m.open.s.Sandbox)
	defer mb.Client.Close()
	if err := upload(ctx, mb); err != nil {
		return rows, fmt.Errorf("upload into the MCP session's sandbox: %w", err)
	}
	ml := *m // the same server, the lsp toolset's endpoint
	ml.endpoint += "?toolsets=lsp"
	viaMCP := func(tool string) func(context.Context) error {
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
			"params": map[string]any{"name": tool, "arguments": json.RawMessage(pos)}})
		return func(ctx context.Context) error {
			got, err := ml.post(ctx, m.open.token, body)
			if err == nil && (!bytes.Contains(got, []byte(`"result"`)) || bytes.Contains(got, []byte(`"isError":true`))) {
				err = fmt.Errorf("MCP %s: %.300s", tool, got)
			}
			return err
		}
	}

	// As the agent's had: time to finish what it does after its first answer (diagnosing
	// the workspace), so both are measured settled.
	time.Sleep(5 * time.Second)

	// Warm requests, the agent's and gopls's in turns, so that the machine's other load
	// falls on both alike.
	refs := map[string]any{"textDocument": p["textDocument"], "position": p["position"], "context": map[string]bool{"includeDeclaration": false}}
	for _, t := range []struct {
		name, tool, method string
		params             any
	}{{"hover", "get_hover", "textDocument/hover", p}, {"definition", "get_definition", "textDocument/definition", p},
		{"references", "get_references", "textDocument/references", refs}} {
		e.logf("lsp %s: agent and gopls stdio in turns…", t.name)
		viaAgent := agentCall(b, t.tool)
		viaStdio := func(ctx context.Context) error {
			var out json.RawMessage
			return direct.conn.Call(ctx, t.method, t.params, &out)
		}
		mcpCall := viaMCP(t.tool)
		var agentSamples, stdioSamples, mcpSamples []time.Duration
		n := e.iterations(200)
		for i := range n + 5 {
			a, err := bench.Run(ctx, 0, 1, viaAgent)
			if err != nil {
				return rows, fmt.Errorf("agent %s: %w", t.name, err)
			}
			d, err := bench.Run(ctx, 0, 1, viaStdio)
			if err != nil {
				return rows, fmt.Errorf("gopls stdio %s: %w", t.name, err)
			}
			mc, err := bench.Run(ctx, 0, 1, mcpCall)
			if err != nil {
				return rows, err
			}
			if i >= 5 { // the first five warm up
				agentSamples, stdioSamples, mcpSamples = append(agentSamples, a...), append(stdioSamples, d...), append(mcpSamples, mc...)
			}
		}
		row := bench.Summarize("lsp "+t.name+" (agent)", agentSamples)
		row.Note = "agent op lsp over the " + e.transport + " path, file synced from disk"
		rows = append(rows, row)
		row = bench.Summarize("lsp "+t.name+" (MCP)", mcpSamples)
		row.Note = "MCP tools/call " + t.tool + " from outside: HTTP, JWT, the lsp toolset, the agent, gopls (another sandbox, same module)"
		rows = append(rows, row)
		row = bench.Summarize("lsp "+t.name+" (gopls stdio)", stdioSamples)
		row.Note = "JSON-RPC straight to gopls over `docker exec -i` stdio"
		rows = append(rows, row)
	}
	return rows, nil
}

// stdioGopls is a gopls reached over a `docker exec -i` of the container.
type stdioGopls struct {
	cmd  *exec.Cmd
	conn *jsonrpc2.Conn
}

type rwc struct {
	io.ReadCloser
	io.WriteCloser
}

func (c rwc) Close() error { c.WriteCloser.Close(); return c.ReadCloser.Close() }

func directGopls(ctx context.Context, container string) (*stdioGopls, error) {
	// The environment the agent gives gopls (lsp.DefaultLanguages, HOME from the agent):
	// a writable HOME for gopls's own file cache, the module settings.
	args := []string{"exec", "-i", "-u", "1000"}
	for _, kv := range []string{"HOME=/tmp", "GOTOOLCHAIN=local", "GOPATH=/tmp/go", "GOMODCACHE=/tmp/go/pkg/mod",
		"GOCACHE=/tmp/.cache/go-build", "GOFLAGS=-mod=mod", "GOPROXY=off", "CGO_ENABLED=0"} {
		args = append(args, "-e", kv)
	}
	cmd := exec.Command("docker", append(args, "-w", "/workspace", container, "gopls")...)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h := jsonrpc2.HandlerWithError(func(ctx context.Context, c *jsonrpc2.Conn, r *jsonrpc2.Request) (any, error) {
		if r.Method == "workspace/configuration" {
			return []any{nil}, nil
		}
		return nil, nil
	})
	conn := jsonrpc2.NewConn(ctx, jsonrpc2.NewBufferedStream(rwc{out, in}, jsonrpc2.VSCodeObjectCodec{}), jsonrpc2.AsyncHandler(h))
	return &stdioGopls{cmd: cmd, conn: conn}, nil
}

func (g *stdioGopls) open(ctx context.Context, root string, files ...string) error {
	var init json.RawMessage
	// What the agent tells gopls it can do, in the parts gopls acts on, so that both are
	// asked the same way.
	caps := json.RawMessage(`{
	  "general": {"positionEncodings": ["utf-8", "utf-16"]},
	  "workspace": {"configuration": true, "workspaceFolders": true, "didChangeWatchedFiles": {"dynamicRegistration": true}},
	  "textDocument": {"hover": {"contentFormat": ["markdown", "plaintext"]}, "definition": {"linkSupport": false},
	    "publishDiagnostics": {"versionSupport": true}},
	  "window": {"workDoneProgress": true}}`)
	if err := g.conn.Call(ctx, "initialize", map[string]any{"processId": nil, "rootUri": "file://" + root,
		"capabilities": caps, "workspaceFolders": []map[string]string{{"uri": "file://" + root, "name": path.Base(root)}}}, &init); err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if err := g.conn.Notify(ctx, "initialized", map[string]any{}); err != nil {
		return err
	}
	for _, file := range files {
		out, err := exec.CommandContext(ctx, "docker", "exec", containerOf(g.cmd), "cat", file).Output()
		if err != nil {
			return fmt.Errorf("read %s: %w", file, err)
		}
		if err := g.conn.Notify(ctx, "textDocument/didOpen", map[string]any{"textDocument": map[string]any{
			"uri": "file://" + file, "languageId": "go", "version": 1, "text": string(out)}}); err != nil {
			return err
		}
	}
	return nil
}

// containerOf is the container a `docker exec` command runs in (its last flag's value).
func containerOf(cmd *exec.Cmd) string {
	for i, a := range cmd.Args {
		if a == "/workspace" && i+1 < len(cmd.Args) {
			return cmd.Args[i+1]
		}
	}
	return ""
}

func (g *stdioGopls) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = g.conn.Call(ctx, "shutdown", nil, nil)
	_ = g.conn.Notify(ctx, "exit", nil)
	g.conn.Close()
	_ = g.cmd.Wait()
}
