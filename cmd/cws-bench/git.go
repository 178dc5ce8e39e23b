package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cwsdev/cws/internal/bench"
)

func init() {
	sections = append(sections, section{
		Name:  "git",
		Order: 25,
		Doc:   "MCP gitStatus, gitDiff and gitLog on a 20-file repository (the default policy's deniedPaths) beside git status --porcelain, git diff and git log in the same container",
		Run:   benchGit,
	})
	goals = append(goals,
		goal{Order: 39, Figure: "MCP gitStatus, 20-file repository, p50, vs git status --porcelain in the container",
			Row: "MCP gitStatus", Anchor: "git status --porcelain in the container", Slower: 1.2})
	ratios = append(ratios,
		ratio{Num: "MCP gitDiff", Den: "git diff in the container", Target: 1.5, AtMost: true},
		ratio{Num: "MCP gitLog", Den: "git log in the container", Target: 1.5, AtMost: true},
		ratio{Num: "MCP gitStatus, deniedPaths", Den: "git status --porcelain in the container", Target: 1.5, AtMost: true},
		ratio{Num: "MCP gitDiff, deniedPaths", Den: "git diff in the container", Target: 1.5, AtMost: true},
	)
}

// gitRepoScript makes a 20-file repository in /workspace with three commits, then
// changes two files and adds one, so that status and diff have something to say.
const gitRepoScript = `set -e
cd /workspace
git init -q .
for i in $(seq 1 20); do printf 'line one of %s\nline two\nline three\n' $i > f$i.txt; done
git add -A
git -c user.name=bench -c user.email=bench@example.com commit -qm first
echo more >> f1.txt; git -c user.name=bench -c user.email=bench@example.com commit -qam second
echo more >> f2.txt; git -c user.name=bench -c user.email=bench@example.com commit -qam third
echo change >> f3.txt; echo change >> f4.txt; echo new > new.txt`

// benchGit times the git tools over MCP against the same git commands run by a shell
// loop in the container, in interleaved rounds.
func benchGit(ctx context.Context, e *env) ([]bench.Row, error) {
	m, err := newMCPRunner(ctx, e)
	if err != nil {
		return nil, err
	}
	defer m.close(ctx)
	sb := m.open.s.Sandbox
	if out, code, err := e.driver.Exec(ctx, sb, []string{"sh", "-c", gitRepoScript}, "cws"); err != nil || code != 0 {
		return nil, fmt.Errorf("make the repository: exit %d, %v: %s", code, err, out)
	}
	// The second session denies paths, so its diff takes the three steps of "Denied
	// paths in git output": list the names, check them, diff.
	denied := m.restricted
	if out, code, err := e.driver.Exec(ctx, denied.s.Sandbox, []string{"sh", "-c", gitRepoScript + `
echo SECRET=1 > .env; printf '{"deniedPaths":[".env","secrets/**"]}' > .cws-policy.json`}, "cws"); err != nil || code != 0 {
		return nil, fmt.Errorf("make the denied-paths repository: exit %d, %v: %s", code, err, out)
	}
	time.Sleep(1100 * time.Millisecond) // the session's cached policy expires (PolicyTTL)
	rows := []*row{
		{name: "MCP gitStatus", note: "raw JSON-RPC tools/call over HTTP, JWT, the default policy", fn: m.tool("gitStatus", `"clean":false`)},
		{name: "MCP gitDiff", note: "raw JSON-RPC tools/call over HTTP, JWT, the default policy", fn: m.tool("gitDiff", `"empty":false`)},
		{name: "MCP gitLog", note: "raw JSON-RPC tools/call over HTTP, JWT, the default policy", fn: m.tool("gitLog", `"count":3`)},
		{name: "MCP gitStatus, deniedPaths", note: "as MCP gitStatus, with deniedPaths [.env secrets/**] (.env is untracked)", fn: m.toolIn(denied, "gitStatus", `"clean":false`)},
		{name: "MCP gitDiff, deniedPaths", note: "as MCP gitDiff, with deniedPaths [.env secrets/**]: one git run (names ahead of the patch), the check", fn: m.toolIn(denied, "gitDiff", `"empty":false`)},
		{name: "MCP runCommand git status --porcelain", note: "the same git command through runCommand: what any command pays", fn: m.run("git", "status", "--porcelain")},
	}
	anchors := []*row{
		{name: "git status --porcelain in the container"},
		{name: "git diff in the container"},
		{name: "git log in the container"},
	}
	for i, cmd := range []string{"git status --porcelain", "git diff", "git log -n 20"} {
		anchors[i].note = fmt.Sprintf("`%s >/dev/null` in a sh loop in the container (docker exec), the mean of %d runs per sample", cmd, anchorBatch)
		anchors[i].fn = gitInContainer(e, sb, cmd+" >/dev/null", anchors[i])
	}
	return interleaveWatched(ctx, e, "git", 10, e.iterations(300), anchors, rows, sb, denied.s.Sandbox)
}

// gitInContainer times a shell loop of anchorBatch runs of cmd in /workspace of the
// sandbox, as the workspace user (cws), and adds the mean per run to r's samples.
func gitInContainer(e *env, sb, cmd string, r *row) func(context.Context) error {
	script := "cd /workspace; " + loopScript(cmd)
	return func(ctx context.Context) error {
		out, code, err := e.driver.Exec(ctx, sb, []string{"sh", "-c", script}, "cws")
		if err != nil {
			return err
		}
		return r.addLoopMean(out, code)
	}
}

// run returns one runCommand of argv in the open session, checked to exit 0.
func (m *mcpRunner) run(command string, args ...string) func(context.Context) error {
	body := runCommandBody(command, args...)
	return func(ctx context.Context) error {
		got, err := m.post(ctx, m.open.token, body)
		if err == nil && (!bytes.Contains(got, []byte(`"result"`)) || bytes.Contains(got, []byte(`"isError":true`)) || !bytes.Contains(got, []byte(`"exitCode":0`))) {
			err = fmt.Errorf("runCommand %s: %.300s", command, got)
		}
		return err
	}
}

// tool returns one call of the named tool with no arguments in the open session,
// checked to succeed and to contain want.
func (m *mcpRunner) tool(name, want string) func(context.Context) error {
	return m.toolIn(m.open, name, want)
}

// toolIn is tool in session s.
func (m *mcpRunner) toolIn(s mcpSession, name, want string) func(context.Context) error {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
		"params": map[string]any{"name": name, "arguments": map[string]any{}}})
	return func(ctx context.Context) error {
		got, err := m.post(ctx, s.token, body)
		if err == nil && (!bytes.Contains(got, []byte(`"result"`)) || bytes.Contains(got, []byte(`"isError":true`)) || !bytes.Contains(got, []byte(want))) {
			err = fmt.Errorf("%s: %.300s", name, got)
		}
		return err
	}
}
