package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cwsdev/cws/api"
	cwsmcp "github.com/cwsdev/cws/api/mcp"
	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
)

func init() {
	sections = append(sections, section{
		Name:  "launch",
		Order: 20,
		Doc:   "start `true` and `id` under allowedCommands (Landlock) and without, through the agent and over MCP, beside the same programs run in the container",
		Run:   benchLaunch,
	})
	ratios = append(ratios,
		ratio{Num: "exec true, allowlist", Den: "exec true, direct", Target: 1.3, AtMost: true},
		ratio{Num: "exec id, allowlist", Den: "exec id, direct", Target: 1.3, AtMost: true},
	)
	goals = append(goals,
		goal{Order: 35, Figure: "MCP runCommand true under allowedCommands, p50, vs true in the container",
			Row: "MCP runCommand true, allowlist", Anchor: "true in the container", MaxOver: 3 * time.Millisecond},
		goal{Order: 36, Figure: "MCP runCommand id under allowedCommands, p50, vs id in the container",
			Row: "MCP runCommand id, allowlist", Anchor: "id in the container", MaxOver: 3 * time.Millisecond},
		goal{Order: 36, Figure: "MCP runCommand id, p50, vs id in the container (what a call adds to a command)",
			Row: "MCP runCommand id", Anchor: "id in the container", MaxOver: time.Millisecond},
		goal{Order: 37, Figure: "MCP runCommand true: allowedCommands vs none",
			Row: "MCP runCommand true, allowlist", Anchor: "MCP runCommand true", Slower: 1.3},
		goal{Order: 38, Figure: "MCP runCommand id: allowedCommands vs none",
			Row: "MCP runCommand id, allowlist", Anchor: "MCP runCommand id", Slower: 1.3},
	)
}

// benchAllowed is the allowlist of the restricted rows: the programs timed, and two that
// resolve to more (git's exec-path, python's ELF interpreter), as a tenant's would.
var benchAllowed = []string{"true", "id", "git", "python3"}

// anchorBatch is how many runs one in-container sample averages (a shell loop), and
// anchorEvery how many interleaved rounds pass between two such samples.
const anchorBatch, anchorEvery = 50, 25

// benchLaunch measures what allowedCommands adds to starting a command: `true` and
// `id` through the agent's exec and through MCP runCommand, each with and without the
// allowlist, in interleaved rounds so that the machine's load falls on all alike; and
// the same programs started by a shell loop inside the container, the anchor.
func benchLaunch(ctx context.Context, e *env) ([]bench.Row, error) {
	b, err := e.sandbox(ctx)
	if err != nil {
		return nil, err
	}
	p, err := b.Client.Ping(ctx)
	if err != nil {
		return nil, err
	}
	if p.Landlock == 0 {
		return nil, fmt.Errorf("the sandbox has no Landlock (ping: ABI 0): nothing to measure")
	}
	m, err := newMCPRunner(ctx, e)
	if err != nil {
		return nil, err
	}
	defer m.close(ctx)

	execPolicy := &agent.ExecPolicy{Programs: benchAllowed, Dirs: []string{"/usr/lib/git-core"}}
	note := fmt.Sprintf("allowedCommands %v, Landlock ABI %d", benchAllowed, p.Landlock)
	var rows []*row
	add := func(name, note string, fn func(context.Context) error) {
		rows = append(rows, &row{name: name, note: note, fn: fn})
	}
	for _, prog := range []string{"true", "id"} {
		add("exec "+prog+", direct", "the agent's exec op, no allowedCommands", agentExec(b.Client, prog, nil))
		add("exec "+prog+", allowlist", "the agent's exec op, "+note, agentExec(b.Client, prog, execPolicy))
		add("MCP runCommand "+prog, "raw JSON-RPC tools/call over HTTP, JWT, no allowedCommands", m.call(m.open, prog))
		add("MCP runCommand "+prog+", allowlist", "raw JSON-RPC tools/call over HTTP, JWT, "+note, m.call(m.restricted, prog))
	}
	anchors := []*row{
		{name: "true in the container", note: fmt.Sprintf("/usr/bin/true in a sh loop in the container, the mean of %d runs per sample", anchorBatch)},
		{name: "id in the container", note: fmt.Sprintf("/usr/bin/id >/dev/null in a sh loop in the container, the mean of %d runs per sample", anchorBatch)},
	}
	anchors[0].fn = inContainer(b.Client, "/usr/bin/true", anchors[0])
	anchors[1].fn = inContainer(b.Client, "/usr/bin/id >/dev/null", anchors[1])

	return interleaveWatched(ctx, e, "launch", 20, e.iterations(500), anchors, rows, b.ID, m.open.s.Sandbox, m.restricted.s.Sandbox)
}

// interleave times rows in n interleaved rounds, after warm rounds that are not kept,
// and runs every anchor once every anchorEvery rounds, so that both see the same load.
func interleave(ctx context.Context, e *env, section string, warm, n int, anchors, rows []*row) ([]bench.Row, error) {
	e.logf("%s: %d interleaved rounds of %d calls, and %d runs in the container every %d rounds…", section, n, len(rows), anchorBatch, anchorEvery)
	for range warm { // connections, caches, the first ruleset
		for _, r := range rows {
			if err := r.fn(ctx); err != nil {
				return nil, fmt.Errorf("%s: %w", r.name, err)
			}
		}
	}
	for i := range n {
		if i%anchorEvery == 0 {
			for _, a := range anchors {
				if err := a.fn(ctx); err != nil {
					return nil, fmt.Errorf("%s: %w", a.name, err)
				}
			}
		}
		for _, r := range rows {
			start := time.Now()
			if err := r.fn(ctx); err != nil {
				return summarize(anchors, rows), fmt.Errorf("%s: %w", r.name, err)
			}
			r.samples = append(r.samples, time.Since(start))
		}
	}
	return summarize(anchors, rows), nil
}

// row is one interleaved measurement.
type row struct {
	name, note string
	fn         func(context.Context) error
	samples    []time.Duration
}

func summarize(groups ...[]*row) []bench.Row {
	var out []bench.Row
	for _, g := range groups {
		for _, r := range g {
			br := bench.Summarize(r.name, r.samples)
			br.Note = r.note
			out = append(out, br)
		}
	}
	return out
}

// agentExec runs prog through the agent's exec op, under p when it is not nil.
func agentExec(c *agent.Client, prog string, p *agent.ExecPolicy) func(context.Context) error {
	return func(ctx context.Context) error {
		r, err := c.Exec(ctx, agent.ExecArgs{Argv: []string{prog}, Launch: p}, nil, nil)
		switch {
		case err != nil:
			return err
		case r.ExitCode != 0 || r.StartError != "":
			return fmt.Errorf("%s: exit %d, %s", prog, r.ExitCode, r.StartError)
		case p != nil && r.Unenforced:
			return fmt.Errorf("%s ran unenforced", prog)
		}
		return nil
	}
}

// inContainer times a shell loop of anchorBatch runs of cmd in the container, with the
// clock read inside it (two runs of date on either side, outside the timed part but for
// their own start and end), and adds the mean per run to r's samples.
func inContainer(c *agent.Client, cmd string, r *row) func(context.Context) error {
	script := loopScript(cmd)
	return func(ctx context.Context) error {
		res, err := c.Exec(ctx, agent.ExecArgs{Argv: []string{"sh", "-c", script}}, nil, nil)
		if err != nil {
			return err
		}
		return r.addLoopMean(res.Stdout, res.ExitCode)
	}
}

// loopScript is a sh loop of anchorBatch runs of cmd that prints the nanoseconds taken.
func loopScript(cmd string) string {
	return fmt.Sprintf(`s=$(date +%%s%%N); i=0; while [ $i -lt %d ]; do %s; i=$((i+1)); done; e=$(date +%%s%%N); echo $((e-s))`, anchorBatch, cmd)
}

// addLoopMean adds the mean run of a loopScript's output to r's samples.
func (r *row) addLoopMean(out []byte, code int) error {
	ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if code != 0 || err != nil {
		return fmt.Errorf("sh loop: exit %d, %q", code, out)
	}
	r.samples = append(r.samples, time.Duration(ns/anchorBatch))
	return nil
}

// mcpRunner is a workspace service behind the real router, with two sessions of the
// dev tenant: one without allowedCommands, and one whose .cws-policy.json allows only
// benchAllowed.
type mcpRunner struct {
	svc              *workspace.Service
	hs               *http.Server
	client           *http.Client
	endpoint         string
	open, restricted mcpSession
}

type mcpSession struct {
	s     *workspace.Session
	token string
}

func newMCPRunner(ctx context.Context, e *env) (m *mcpRunner, err error) {
	tenants, _ := auth.NewDevTenants()
	pols := policy.ByTenant{auth.DevTenantID: policy.Default()}
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: memstore.New(), Sandboxes: e.driver, Tenants: pols, DefaultImage: e.image, LocalReads: e.localReads})
	verifier := auth.NewVerifier(tenants, auth.VerifierOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		svc.Close()
		return nil, err
	}
	base := "http://" + ln.Addr().String()
	mh := cwsmcp.New(cwsmcp.Config{Service: svc, Verifier: verifier, Tenants: pols, ResourceMetadataURL: base + auth.WellKnownPath})
	m = &mcpRunner{svc: svc, endpoint: base + "/mcp", client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}},
		hs: &http.Server{Handler: api.New(api.Config{Service: svc, Verifier: verifier, MCP: mh, PublicURL: base})}}
	go m.hs.Serve(ln)
	defer func() {
		if err != nil {
			m.close(ctx)
		}
	}()
	for i, s := range []*mcpSession{&m.open, &m.restricted} {
		caller := workspace.Caller{Tenant: auth.DevTenantID, Subject: fmt.Sprintf("bench-launch-%d", i), Scopes: auth.AllScopes()}
		e.logf("creating MCP session %d/2…", i+1)
		if s.s, err = svc.CreateSession(ctx, caller, workspace.CreateRequest{}); err != nil {
			return m, err
		}
		if s.token, err = tenants.Get(auth.DevTenantID).Mint(s.s.Subject, time.Hour, s.s.ID, nil, time.Now()); err != nil {
			return m, err
		}
	}
	pol, _ := json.Marshal(map[string]any{"allowedCommands": benchAllowed})
	if out, code, err := e.driver.Exec(ctx, m.restricted.s.Sandbox, []string{"sh", "-c", `printf '%s' "$1" > /workspace/.cws-policy.json`, "sh", string(pol)}, ""); err != nil || code != 0 {
		return m, fmt.Errorf("write the allowlist session's .cws-policy.json: exit %d, %v: %s", code, err, out)
	}
	// The allowlist must hold in the kernel, not only in cws's check: python3 may run,
	// but what it execs may not.
	body := runCommandBody("python3", "-c", `import os; os.execv("/usr/bin/env", ["env"])`)
	if got, err := m.post(ctx, m.restricted.token, body); err != nil {
		return m, err
	} else if !bytes.Contains(got, []byte("PermissionError")) {
		return m, fmt.Errorf("python3 exec'd env under allowedCommands %v: %.300s", benchAllowed, got)
	}
	if got, err := m.post(ctx, m.restricted.token, runCommandBody("sh", "-c", "true")); err != nil {
		return m, err
	} else if !bytes.Contains(got, []byte("not in allowedCommands")) {
		return m, fmt.Errorf("sh ran under allowedCommands %v: %.300s", benchAllowed, got)
	}
	return m, nil
}

func runCommandBody(command string, args ...string) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
		"params": map[string]any{"name": "runCommand", "arguments": map[string]any{"command": command, "args": args}}})
	return b
}

// call returns one runCommand of prog in s, checked to exit 0.
func (m *mcpRunner) call(s mcpSession, prog string) func(context.Context) error {
	body := runCommandBody(prog)
	return func(ctx context.Context) error {
		got, err := m.post(ctx, s.token, body)
		if err == nil && (!bytes.Contains(got, []byte(`"result"`)) || bytes.Contains(got, []byte(`"isError":true`)) || !bytes.Contains(got, []byte(`"exitCode":0`))) {
			err = fmt.Errorf("runCommand %s: %.300s", prog, got)
		}
		return err
	}
}

func (m *mcpRunner) post(ctx context.Context, token string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("tools/call: HTTP %d: %.300s", resp.StatusCode, got)
	}
	return got, err
}

func (m *mcpRunner) close(ctx context.Context) {
	for _, s := range []mcpSession{m.open, m.restricted} {
		if s.s != nil {
			_ = m.svc.DeleteSession(context.WithoutCancel(ctx), workspace.Caller{Tenant: auth.DevTenantID, Subject: s.s.Subject, Scopes: auth.AllScopes()}, s.s.ID)
		}
	}
	m.hs.Close()
	m.svc.Close()
}
