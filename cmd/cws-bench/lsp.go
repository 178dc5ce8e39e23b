package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
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
		Doc:   "gopls through the agent's LSP manager (cold start, warm hover/definition/references) vs gopls over stdio in the same container",
		Run:   benchLSP,
	})
	ratios = append(ratios,
		ratio{Num: "lsp hover (agent)", Den: "lsp hover (gopls stdio)", Target: 1.5, AtMost: true},
		ratio{Num: "lsp definition (agent)", Den: "lsp definition (gopls stdio)", Target: 1.5, AtMost: true},
		ratio{Num: "lsp references (agent)", Den: "lsp references (gopls stdio)", Target: 1.5, AtMost: true})
}

// lspModule writes a mid-size Go module (pkgs × files × funcs functions, each calling
// the one before it across files and packages) and returns the file and position of a
// symbol used across it: line and character are 1-based.
func lspModule(ctx context.Context, c *agent.Client, pkgs, files, funcs int) (string, int, int, error) {
	write := func(p, s string) error {
		_, err := c.WriteFile(ctx, agent.WriteArgs{Path: "lspbench/" + p, Create: true, Mkdirs: true}, []byte(s))
		return err
	}
	if err := write("go.mod", "module example.com/lspbench\n\ngo 1.22\n"); err != nil {
		return "", 0, 0, err
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
			if err := write(fmt.Sprintf("p%d/f%d.go", p, f), b.String()); err != nil {
				return "", 0, 0, err
			}
		}
	}
	// In p1/f0.go (package, blank, "import (", fmt, strings, blank, prev, ")", blank,
	// comment, func), line 12 is F0_0's body: "\treturn prev.F0_<funcs-1>(s)".
	return "lspbench/p1/f0.go", 12, len("\treturn prev.") + 1, nil
}

func benchLSP(ctx context.Context, e *env) ([]bench.Row, error) {
	b, err := e.sandbox(ctx)
	if err != nil {
		return nil, err
	}
	e.logf("writing a Go module (8 packages × 10 files × 20 functions)…")
	file, line, char, err := lspModule(ctx, b.Client, 8, 10, 20)
	if err != nil {
		return nil, fmt.Errorf("write module: %w", err)
	}
	pos := func() json.RawMessage {
		r, _ := json.Marshal(map[string]any{"file_path": file, "line": line, "character": char})
		return r
	}
	agentCall := func(tool string) func(context.Context) error {
		return func(ctx context.Context) error {
			r, err := b.Client.LSP(ctx, agent.LSPArgs{Tool: tool, Args: pos()})
			if err == nil && (len(r.Result) == 0 || string(r.Result) == "null" || string(r.Result) == "[]") {
				err = fmt.Errorf("%s: empty answer", tool)
			}
			return err
		}
	}
	var rows []bench.Row
	e.logf("lsp: first answer (gopls start + load)…")
	start := time.Now()
	if err := agentCall("get_definition")(ctx); err != nil {
		return rows, fmt.Errorf("first definition: %w", err)
	}
	rows = append(rows, bench.Row{Name: "lsp first answer (agent)", N: 1, Mean: time.Since(start), P50: time.Since(start), P99: time.Since(start),
		Note: "gopls start, module load, definition"})
	for _, t := range []struct{ row, tool string }{{"lsp hover (agent)", "get_hover"}, {"lsp definition (agent)", "get_definition"}, {"lsp references (agent)", "get_references"}} {
		e.logf("%s…", t.row)
		samples, err := bench.Run(ctx, 5, e.iterations(200), agentCall(t.tool))
		row := bench.Summarize(t.row, samples)
		row.Note = "agent op lsp over the bridge, file synced from disk"
		rows = append(rows, row)
		if err != nil {
			return rows, err
		}
	}

	e.logf("lsp: gopls over stdio (docker exec -i)…")
	direct, err := directGopls(ctx, b.ID)
	if err != nil {
		return rows, fmt.Errorf("gopls stdio: %w", err)
	}
	defer direct.close()
	start = time.Now()
	if err := direct.open(ctx, "/workspace/lspbench", "/workspace/"+file); err != nil {
		return rows, err
	}
	p := map[string]any{"textDocument": map[string]string{"uri": "file:///workspace/" + file},
		"position": map[string]int{"line": line - 1, "character": char - 1}}
	var loc []any
	if err := direct.conn.Call(ctx, "textDocument/definition", p, &loc); err != nil || len(loc) == 0 {
		return rows, fmt.Errorf("first definition over stdio: %v (%d locations)", err, len(loc))
	}
	rows = append(rows, bench.Row{Name: "lsp first answer (gopls stdio)", N: 1, Mean: time.Since(start), P50: time.Since(start), P99: time.Since(start),
		Note: "a second gopls, same container, same module"})
	refs := map[string]any{"textDocument": p["textDocument"], "position": p["position"], "context": map[string]bool{"includeDeclaration": false}}
	for _, t := range []struct {
		row, method string
		params      any
	}{{"lsp hover (gopls stdio)", "textDocument/hover", p}, {"lsp definition (gopls stdio)", "textDocument/definition", p},
		{"lsp references (gopls stdio)", "textDocument/references", refs}} {
		e.logf("%s…", t.row)
		samples, err := bench.Run(ctx, 5, e.iterations(200), func(ctx context.Context) error {
			var out json.RawMessage
			return direct.conn.Call(ctx, t.method, t.params, &out)
		})
		row := bench.Summarize(t.row, samples)
		row.Note = "JSON-RPC straight to gopls over `docker exec -i` stdio"
		rows = append(rows, row)
		if err != nil {
			return rows, err
		}
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
	cmd := exec.Command("docker", "exec", "-i", "-u", "1000", "-w", "/workspace/lspbench", container, "gopls")
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

func (g *stdioGopls) open(ctx context.Context, root, file string) error {
	var init json.RawMessage
	if err := g.conn.Call(ctx, "initialize", map[string]any{"processId": nil, "rootUri": "file://" + root,
		"capabilities": map[string]any{}, "workspaceFolders": []map[string]string{{"uri": "file://" + root, "name": "lspbench"}}}, &init); err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if err := g.conn.Notify(ctx, "initialized", map[string]any{}); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "docker", "exec", containerOf(g.cmd), "cat", file).Output()
	if err != nil {
		return fmt.Errorf("read %s: %w", file, err)
	}
	return g.conn.Notify(ctx, "textDocument/didOpen", map[string]any{"textDocument": map[string]any{
		"uri": "file://" + file, "languageId": "go", "version": 1, "text": string(out)}})
}

// containerOf is the container a `docker exec` command runs in (its last flag's value).
func containerOf(cmd *exec.Cmd) string {
	for i, a := range cmd.Args {
		if a == "/workspace/lspbench" && i+1 < len(cmd.Args) {
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
