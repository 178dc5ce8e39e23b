package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox/docker"
	"github.com/cwsdev/cws/version"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
	"github.com/cwsdev/cws/workspace/toolset/core"
)

// landlockEnv is the workspace service on real Docker, one session per tenant policy.
type landlockEnv struct {
	svc    *workspace.Service
	driver *docker.Driver
	sess   map[string]*workspace.Session // by tenant
}

// Tenants of TestLandlock: git only, nothing at all (the git tools still run git),
// git and python, and the control with no allowedCommands (nothing enforced).
const (
	llGit   = "ll-git"
	llNone  = "ll-none"
	llTools = "ll-tools"
	llOpen  = "ll-open"
)

// llSetup prepares each workspace with a plain `docker exec` (not under test): a
// repository with a commit and a modified file, a second repository whose .git/config
// names a hooks directory with a pre-commit hook, a clean filter in .git/config and
// .gitattributes, and a `#!/usr/bin/env python3` script.
const llSetup = `set -e
cd /workspace
git init -q . && git config user.email t@example.com && git config user.name t
echo a > a.txt && git add a.txt && git commit -qm init && echo b >> a.txt
git config filter.pwn.clean "sh -c 'touch marker-filter; cat'" && echo 'f.txt filter=pwn' > .gitattributes && echo f > f.txt
printf '#!/usr/bin/env python3\nopen("/workspace/marker-script", "w")\n' > x.py && chmod +x x.py
printf 'print("py ok")\n' > hello.py
mkdir hookrepo && cd hookrepo && git init -q . && git config user.email t@example.com && git config user.name t
git commit -qm init --allow-empty
mkdir hooks && printf '#!/bin/sh\ntouch /workspace/marker-hook\n' > hooks/pre-commit && chmod +x hooks/pre-commit
git config core.hooksPath hooks
`

// TestLandlock checks, in real containers on the real kernel, that allowedCommands
// holds for everything an allowed program starts: for a tenant that allows git but not
// sh, each of git's program-spawning routes fails to start sh and its marker file is
// never created, while the same call under a tenant without allowedCommands (the
// control) does create it. The git tools hold a tenant with no allowed command to git.
// Allowed programs, git's builtins and a #!/usr/bin/env python3 program still work.
func TestLandlock(t *testing.T) {
	dockerOnly(t, "drives the Docker driver directly")
	requireRealDeps(t)
	e := newLandlockEnv(t)

	routes := []struct {
		name, marker string
		tenant       string // the restricted tenant it runs under
		cwd          string
		args         []string // git's
	}{
		{"alias !sh", "marker-alias", llGit, "", []string{"-c", "alias.pwn=!sh -c 'touch marker-alias'", "pwn"}},
		{"core.fsmonitor", "marker-fsmonitor", llGit, "", []string{"-c", "core.fsmonitor=sh -c 'touch marker-fsmonitor'", "status"}},
		{"core.pager", "marker-pager", llGit, "", []string{"-c", "core.pager=sh -c 'touch marker-pager'", "--paginate", "log"}},
		{"core.editor", "marker-editor", llGit, "", []string{"-c", "core.editor=sh -c 'touch marker-editor'", "commit", "--allow-empty"}},
		{"diff.external", "marker-diffext", llGit, "", []string{"-c", "diff.external=sh -c 'touch marker-diffext'", "diff"}},
		{"ext:: transport", "marker-ext", llGit, "", []string{"-c", "protocol.ext.allow=always", "ls-remote", "ext::sh -c touch% marker-ext"}},
		{"pre-commit hook (core.hooksPath in .git/config)", "marker-hook", llGit, "hookrepo", []string{"commit", "-qm", "x", "--allow-empty"}},
		{"alias to a workspace #! script, python3 allowed", "marker-script", llTools, "", []string{"-c", "alias.x=!./x.py", "x"}},
	}
	for _, r := range routes {
		t.Run(r.name, func(t *testing.T) {
			ctl := e.run(t, llOpen, "git", r.cwd, r.args...)
			if !e.exists(t, llOpen, r.marker) {
				// git starts a pager only when stdout is a terminal, and the agent never
				// gives a command one: the route is closed before Landlock.
				t.Skipf("the control (no allowedCommands) did not create %s either, so the route is not reachable through runCommand: exit %d, stderr %q",
					r.marker, ctl.ExitCode, ctl.Stderr)
			}
			res := e.run(t, r.tenant, "git", r.cwd, r.args...)
			if e.exists(t, r.tenant, r.marker) {
				t.Errorf("%s was created under allowedCommands %s: exit %d, stderr %q", r.marker, r.tenant, res.ExitCode, res.Stderr)
			}
			if !strings.Contains(strings.ToLower(res.Stderr), "permission denied") {
				t.Errorf("stderr %q does not say the exec was denied", res.Stderr)
			}
		})
	}

	t.Run("python3 subprocess sh", func(t *testing.T) {
		args := []string{"-c", "import subprocess; subprocess.run(['sh', '-c', 'touch marker-pysub'])"}
		e.run(t, llOpen, "python3", "", args...)
		if !e.exists(t, llOpen, "marker-pysub") {
			t.Fatal("the control did not create marker-pysub")
		}
		res := e.run(t, llTools, "python3", "", args...)
		if e.exists(t, llTools, "marker-pysub") || res.ExitCode == 0 || !strings.Contains(res.Stderr, "PermissionError") {
			t.Errorf("python3 started sh: exit %d, stderr %q", res.ExitCode, res.Stderr)
		}
	})

	t.Run("startProcess: a background git alias !sh", func(t *testing.T) {
		args := []string{"-c", "alias.pwn=!sh -c 'touch marker-proc'", "pwn"}
		e.background(t, llOpen, "git", args...)
		if !e.exists(t, llOpen, "marker-proc") {
			t.Fatal("the control did not create marker-proc")
		}
		out := e.background(t, llGit, "git", args...)
		if e.exists(t, llGit, "marker-proc") {
			t.Errorf("marker-proc created by a background git under allowedCommands [git]: %s", out)
		}
	})

	t.Run("gitCommit tool runs no clean filter with no allowed command", func(t *testing.T) {
		e.tool(t, llOpen, "gitCommit", map[string]any{"message": "control", "all": true})
		if !e.exists(t, llOpen, "marker-filter") {
			t.Fatal("the control did not create marker-filter")
		}
		// git refuses to add a file whose filter cannot start, or commits it unfiltered
		// (filter.<driver>.required unset): either way the filter never runs.
		raw, _ := json.Marshal(map[string]any{"message": "filtered", "all": true})
		res, err := e.svc.Call(t.Context(), e.caller(llNone), e.sess[llNone].ID, "gitCommit", raw, workspace.CallOptions{})
		if err != nil {
			t.Fatalf("gitCommit: %v", err)
		}
		v, _ := json.Marshal(res.Value)
		if e.exists(t, llNone, "marker-filter") {
			t.Errorf("the clean filter ran under allowedCommands []: %s", v)
		}
		if res.IsError && !strings.Contains(string(v), "Permission denied") {
			t.Errorf("gitCommit = %s, want a commit or the filter's exec denied", v)
		}
		// Without the filter, the git tools work: git itself may run.
		e.tool(t, llNone, "writeFile", map[string]any{"path": ".gitattributes", "contents": ""})
		if v := e.tool(t, llNone, "gitCommit", map[string]any{"message": "plain", "all": true}); !strings.Contains(v, `"commit"`) {
			t.Errorf("gitCommit = %s, want a commit", v)
		}
		if s := e.tool(t, llNone, "gitStatus", map[string]any{}); !strings.Contains(s, `"branch"`) {
			t.Errorf("gitStatus = %s", s)
		}
	})

	t.Run("allowed programs and git builtins work", func(t *testing.T) {
		for _, c := range []struct {
			tenant, cmd string
			args        []string
			stdout      string
		}{
			{llGit, "git", []string{"status", "--short"}, "a.txt"},
			{llGit, "git", []string{"commit", "-qm", "second", "--allow-empty"}, ""},
			{llGit, "git", []string{"log", "--format=%s"}, "second"},
			{llGit, "git", []string{"rev-parse", "--git-path", "objects"}, ".git/objects"}, // a dashed builtin path
			{llTools, "python3", []string{"hello.py"}, "py ok"},
			{llTools, "pdb3", []string{"-c", "continue", "-c", "quit", "hello.py"}, "py ok"}, // /usr/bin/pdb3 is "#! /usr/bin/env python3"
		} {
			res := e.run(t, c.tenant, c.cmd, "", c.args...)
			if res.ExitCode != 0 || !strings.Contains(res.Stdout, c.stdout) {
				t.Errorf("%s %s under %s: exit %d, stdout %q, stderr %q; want exit 0 and %q",
					c.cmd, strings.Join(c.args, " "), c.tenant, res.ExitCode, res.Stdout, res.Stderr, c.stdout)
			}
		}
	})
}

func newLandlockEnv(t *testing.T) *landlockEnv {
	t.Helper()
	tenants := policy.ByTenant{}
	for tenant, pol := range map[string]string{
		llGit:   `{"allowedCommands": ["git"]}`,
		llNone:  `{"allowedCommands": []}`,
		llTools: `{"allowedCommands": ["git", "python3", "pdb3"]}`,
		llOpen:  `{}`,
	} {
		p, err := policy.Parse([]byte(pol))
		if err != nil {
			t.Fatal(err)
		}
		tenants[tenant+"-"+runID] = p
	}
	drv, err := docker.New(docker.Config{AgentBinary: agentBinary, Instance: instance})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: store, Sandboxes: drv, Tenants: tenants, DefaultImage: version.WorkspaceImage})
	t.Cleanup(svc.Close)
	e := &landlockEnv{svc: svc, driver: drv, sess: map[string]*workspace.Session{}}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for _, tenant := range []string{llGit, llNone, llTools, llOpen} {
		caller := workspace.Caller{Tenant: tenant + "-" + runID, Subject: "landlock", Scopes: auth.AllScopes()}
		s, err := svc.CreateSession(ctx, caller, workspace.CreateRequest{})
		if err != nil {
			t.Fatalf("create a session of %s: %v", tenant, err)
		}
		t.Cleanup(func() { _ = svc.DeleteSession(context.WithoutCancel(ctx), caller, s.ID) })
		e.sess[tenant] = s
		if out, code, err := drv.Exec(ctx, s.Sandbox, []string{"sh", "-c", llSetup}, ""); err != nil || code != 0 {
			t.Fatalf("set up %s's workspace: exit %d, %v: %s", tenant, code, err, out)
		}
	}
	return e
}

func (e *landlockEnv) caller(tenant string) workspace.Caller {
	return workspace.Caller{Tenant: tenant + "-" + runID, Subject: "landlock", Scopes: auth.AllScopes()}
}

// tool calls a tool that must succeed and returns its value as JSON.
func (e *landlockEnv) tool(t *testing.T, tenant, name string, args any) string {
	t.Helper()
	raw, _ := json.Marshal(args)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := e.svc.Call(ctx, e.caller(tenant), e.sess[tenant].ID, name, raw, workspace.CallOptions{})
	if err != nil {
		t.Fatalf("%s under %s: %v", name, tenant, err)
	}
	out, _ := json.Marshal(res.Value)
	if res.IsError {
		t.Fatalf("%s under %s: error result %s", name, tenant, out)
	}
	return string(out)
}

// run calls runCommand and returns its result, whatever the exit code.
func (e *landlockEnv) run(t *testing.T, tenant, command, cwd string, args ...string) *core.RunCommandResult {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"command": command, "args": args, "options": map[string]any{"cwd": cwd, "timeout": 30}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := e.svc.Call(ctx, e.caller(tenant), e.sess[tenant].ID, "runCommand", raw, workspace.CallOptions{})
	if err != nil {
		t.Fatalf("runCommand %s %v under %s: %v", command, args, tenant, err)
	}
	return res.Value.(*core.RunCommandResult)
}

// background starts a process, waits for it to end and returns its output.
func (e *landlockEnv) background(t *testing.T, tenant, command string, args ...string) string {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"command": command, "args": args})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := e.svc.Call(ctx, e.caller(tenant), e.sess[tenant].ID, "startProcess", raw, workspace.CallOptions{})
	if err != nil {
		t.Fatalf("startProcess %s %v under %s: %v", command, args, tenant, err)
	}
	id := res.Value.(*core.ProcessInfo).ID
	raw, _ = json.Marshal(map[string]any{"id": id, "waitMs": 10000})
	for range 5 {
		res, err = e.svc.Call(ctx, e.caller(tenant), e.sess[tenant].ID, "readProcessOutput", raw, workspace.CallOptions{})
		if err != nil {
			t.Fatalf("readProcessOutput: %v", err)
		}
		if out := res.Value.(*core.ProcessOutput); !out.Process.Running {
			return fmt.Sprintf("exit %v, stdout %q, stderr %q", out.Process.ExitCode, out.Stdout, out.Stderr)
		}
	}
	t.Fatalf("background %s still running", command)
	return ""
}

// exists reports whether /workspace/name exists in tenant's sandbox (a plain docker
// exec, outside any policy).
func (e *landlockEnv) exists(t *testing.T, tenant, name string) bool {
	t.Helper()
	_, code, err := e.driver.Exec(t.Context(), e.sess[tenant].Sandbox, []string{"test", "-e", "/workspace/" + name}, "")
	if err != nil {
		t.Fatalf("test -e %s: %v", name, err)
	}
	return code == 0
}
