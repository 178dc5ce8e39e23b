package workspace_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/toolset/core"
)

func TestRunCommand(t *testing.T) {
	e := newTestEnv(t, "")
	e.put("sub/dir/f.txt", "content of f\n")
	for _, tc := range []struct {
		name           string
		args           map[string]any
		exit           int
		stdout, stderr string
		isError        bool
	}{
		{"exit 0", map[string]any{"command": "echo", "args": []string{"hello", "world"}}, 0, "hello world\n", "", false},
		{"no args", map[string]any{"command": "true"}, 0, "", "", false},
		{"exit code and both streams", map[string]any{"command": "sh", "args": []string{"-c", "echo out; echo err >&2; exit 3"}}, 3, "out\n", "err\n", true},
		{"args are not shell-expanded", map[string]any{"command": "echo", "args": []string{"$HOME", "*", "a;b"}}, 0, "$HOME * a;b\n", "", false},
		{"cwd", map[string]any{"command": "cat", "args": []string{"f.txt"}, "options": map[string]any{"cwd": "sub/dir"}}, 0, "content of f\n", "", false},
		{"cwd under /workspace", map[string]any{"command": "cat", "args": []string{"f.txt"}, "options": map[string]any{"cwd": "/workspace/sub/dir"}}, 0, "content of f\n", "", false},
		{"allowed env", map[string]any{"command": "sh", "args": []string{"-c", `printf "%s|%s" "$TZ" "$LC_ALL"`}, "options": map[string]any{"env": map[string]string{"TZ": "UTC", "LC_ALL": "C"}}}, 0, "UTC|C", "", false},
		{"PATH is the safe PATH", map[string]any{"command": "sh", "args": []string{"-c", `printf %s "$PATH"`}}, 0, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "", false},
		{"stdin is empty", map[string]any{"command": "cat"}, 0, "", "", false},
		{"seed option timeout", map[string]any{"workspaceRoot": ".", "command": "echo", "args": []string{"-n", "x"}, "options": map[string]any{"cwd": ".", "timeout": 60, "confirmed": true}}, 0, "x", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.sub(t)
			res, err := e.call("runCommand", tc.args)
			if err != nil {
				t.Fatal(err)
			}
			r := value[*core.RunCommandResult](t, res.Value)
			if r.ExitCode != tc.exit || r.Stdout != tc.stdout || r.Stderr != tc.stderr || res.IsError != tc.isError {
				t.Errorf("got exit %d, stdout %q, stderr %q, isError %v; want %d, %q, %q, %v",
					r.ExitCode, r.Stdout, r.Stderr, res.IsError, tc.exit, tc.stdout, tc.stderr, tc.isError)
			}
			if r.Command != tc.args["command"] || r.Args == nil || r.TimedOut {
				t.Errorf("command = %q, args = %v, timedOut = %v", r.Command, r.Args, r.TimedOut)
			}
		})
	}

	t.Run("seed response fields", func(t *testing.T) {
		e := e.sub(t)
		v := e.ok("runCommand", map[string]any{"command": "echo", "args": []string{"-n", "ok"}})
		s := asJSON(v)
		if !containsAll(s, `"command":"echo"`, `"args":["-n","ok"]`, `"exitCode":0`, `"stdout":"ok"`, `"stderr":""`) {
			t.Errorf("result = %s", s)
		}
	})
	t.Run("timeout kills and reports timedOut", func(t *testing.T) {
		e := e.sub(t)
		res, err := e.call("runCommand", map[string]any{"command": "sleep", "args": []string{"30"}, "options": map[string]any{"timeout": 1}})
		if err != nil {
			t.Fatal(err)
		}
		r := value[*core.RunCommandResult](t, res.Value)
		if !r.TimedOut || !res.IsError || r.ExitCode != -1 {
			t.Errorf("timedOut = %v, isError = %v, exit = %d", r.TimedOut, res.IsError, r.ExitCode)
		}
	})
	t.Run("missing program is an error result", func(t *testing.T) {
		e := e.sub(t)
		res, err := e.call("runCommand", map[string]any{"command": "no-such-program-cws"})
		if err != nil {
			t.Fatal(err)
		}
		r := value[*core.RunCommandResult](t, res.Value)
		if !res.IsError || r.ExitCode != -1 || !strings.Contains(r.Stderr, "not found") {
			t.Errorf("isError = %v, exit = %d, stderr = %q", res.IsError, r.ExitCode, r.Stderr)
		}
	})
	t.Run("output streams to OnOutput", func(t *testing.T) {
		e := e.sub(t)
		var mu sync.Mutex
		got := map[string]string{}
		res, err := e.callOpts("runCommand", map[string]any{"command": "sh", "args": []string{"-c", "echo one; echo two >&2; echo three"}},
			workspace.CallOptions{OnOutput: func(stream string, data []byte) {
				mu.Lock()
				got[stream] += string(data)
				mu.Unlock()
			}})
		if err != nil || res.IsError {
			t.Fatalf("err = %v, result = %s", err, asJSON(res))
		}
		mu.Lock()
		defer mu.Unlock()
		if got["stdout"] != "one\nthree\n" || got["stderr"] != "two\n" {
			t.Errorf("streamed = %q", got)
		}
	})
	for _, tc := range []struct {
		name string
		args map[string]any
		want error
	}{
		{"env not in allowlist", map[string]any{"command": "true", "options": map[string]any{"env": map[string]string{"FOO": "1"}}}, workspace.ErrPolicy},
		{"bad env name", map[string]any{"command": "true", "options": map[string]any{"env": map[string]string{"A=B": "1"}}}, workspace.ErrInvalid},
		{"negative timeout", map[string]any{"command": "true", "options": map[string]any{"timeout": -1}}, workspace.ErrInvalid},
		{"timeout too long", map[string]any{"command": "true", "options": map[string]any{"timeout": 3601}}, workspace.ErrInvalid},
		{"timeout as a string", map[string]any{"command": "true", "options": map[string]any{"timeout": "60"}}, workspace.ErrInvalid},
		{"empty command", map[string]any{"command": ""}, workspace.ErrInvalid},
		{"cwd outside", map[string]any{"command": "true", "options": map[string]any{"cwd": "../"}}, workspace.ErrTraversal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.sub(t)
			e.refused(tc.want, "runCommand", tc.args)
		})
	}
	t.Run("cwd that is a file", func(t *testing.T) {
		e := e.sub(t)
		e.failed("runCommand", map[string]any{"command": "true", "options": map[string]any{"cwd": "sub/dir/f.txt"}})
	})
}

func TestRunCommandConfirmation(t *testing.T) {
	e := newTestEnv(t, `{"confirmationRequired": ["runCommand", "startProcess"]}`)
	e.refused(workspace.ErrConfirm, "runCommand", map[string]any{"command": "echo", "args": []string{"x"}})
	e.refused(workspace.ErrConfirm, "runCommand", map[string]any{"command": "echo", "options": map[string]any{"confirmed": false}})
	r := value[*core.RunCommandResult](t, e.ok("runCommand", map[string]any{"command": "echo", "args": []string{"x"}, "options": map[string]any{"confirmed": true}}))
	if r.Stdout != "x\n" {
		t.Errorf("stdout = %q", r.Stdout)
	}
	e.refused(workspace.ErrConfirm, "startProcess", map[string]any{"command": "true"})
	// Tools not listed need no confirmation.
	e.put("f.txt", "x")
	e.ok("readFile", map[string]any{"path": "f.txt"})
}

func TestProcesses(t *testing.T) {
	e := newTestEnv(t, "")
	// A process that writes, then waits on its stdin-less loop until killed.
	p := value[*core.ProcessInfo](t, e.ok("startProcess", map[string]any{"command": "sh",
		"args": []string{"-c", "echo started; echo warn >&2; while :; do sleep 1; done"}}))
	if p.ID == "" || p.PID <= 0 || !p.Running || p.Command != "sh" || len(p.Args) != 2 || !isoSecond.MatchString(p.StartedAt) {
		t.Fatalf("start = %s", asJSON(p))
	}
	t.Cleanup(func() { e.call("killProcess", map[string]any{"id": p.ID}) })

	// Follow the output until both lines are in (the wait ends early only on exit).
	var stdout, stderr string
	var outOff, errOff int64
	var streamed strings.Builder
	var mu sync.Mutex
	for i := 0; i < 50 && (stdout != "started\n" || stderr != "warn\n"); i++ {
		res, err := e.callOpts("readProcessOutput", map[string]any{"id": p.ID, "stdoutOffset": outOff, "stderrOffset": errOff, "waitMs": 200},
			workspace.CallOptions{OnOutput: func(stream string, data []byte) {
				mu.Lock()
				streamed.WriteString(stream + ":" + string(data))
				mu.Unlock()
			}})
		if err != nil {
			t.Fatal(err)
		}
		o := value[*core.ProcessOutput](t, res.Value)
		stdout, stderr = stdout+o.Stdout, stderr+o.Stderr
		outOff, errOff = o.StdoutOffset, o.StderrOffset
		if !o.Process.Running {
			t.Fatalf("process ended: %s", asJSON(o))
		}
	}
	if stdout != "started\n" || stderr != "warn\n" || outOff != int64(len(stdout)) || errOff != int64(len(stderr)) {
		t.Fatalf("stdout %q (offset %d), stderr %q (offset %d)", stdout, outOff, stderr, errOff)
	}
	mu.Lock()
	if s := streamed.String(); !strings.Contains(s, "stdout:started\n") || !strings.Contains(s, "stderr:warn\n") {
		t.Errorf("OnOutput got %q", s)
	}
	mu.Unlock()

	// Reading from the offsets again returns nothing new.
	o := value[*core.ProcessOutput](t, e.ok("readProcessOutput", map[string]any{"id": p.ID, "stdoutOffset": outOff, "stderrOffset": errOff}))
	if o.Stdout != "" || o.Stderr != "" {
		t.Errorf("re-read = %q %q", o.Stdout, o.Stderr)
	}
	// From zero, everything again.
	o = value[*core.ProcessOutput](t, e.ok("readProcessOutput", map[string]any{"id": p.ID}))
	if o.Stdout != "started\n" {
		t.Errorf("read from 0 = %q", o.Stdout)
	}

	l := value[*core.ListProcessesResult](t, e.ok("listProcesses", map[string]any{}))
	if l.Count != 1 || l.Processes[0].ID != p.ID || !l.Processes[0].Running {
		t.Errorf("list = %s", asJSON(l))
	}

	k := value[*core.ProcessInfo](t, e.ok("killProcess", map[string]any{"id": p.ID}))
	if k.ID != p.ID {
		t.Errorf("kill = %s", asJSON(k))
	}
	// Killing returns once the process is gone, or the next read with a wait sees it end.
	o = value[*core.ProcessOutput](t, e.ok("readProcessOutput", map[string]any{"id": p.ID, "stdoutOffset": outOff, "stderrOffset": errOff, "waitMs": 10000}))
	if o.Process.Running || o.Process.EndedAt == "" || o.Process.ExitCode == nil {
		t.Errorf("after kill: %s", asJSON(o.Process))
	}
	l = value[*core.ListProcessesResult](t, e.ok("listProcesses", nil))
	if l.Count != 1 || l.Processes[0].Running {
		t.Errorf("list after kill = %s", asJSON(l))
	}

	t.Run("a finished process's exit code", func(t *testing.T) {
		e := e.sub(t)
		p := value[*core.ProcessInfo](t, e.ok("startProcess", map[string]any{"command": "sh", "args": []string{"-c", "echo done; exit 7"}}))
		o := value[*core.ProcessOutput](t, e.ok("readProcessOutput", map[string]any{"id": p.ID, "waitMs": 30000}))
		if o.Process.Running || o.Process.ExitCode == nil || *o.Process.ExitCode != 7 || o.Stdout != "done\n" {
			t.Errorf("finished = %s", asJSON(o))
		}
	})
	t.Run("unknown id", func(t *testing.T) {
		e := e.sub(t)
		e.failed("readProcessOutput", map[string]any{"id": "p999"})
		e.failed("killProcess", map[string]any{"id": "p999"})
	})
	t.Run("waitMs bounds", func(t *testing.T) {
		e := e.sub(t)
		e.refused(workspace.ErrInvalid, "readProcessOutput", map[string]any{"id": p.ID, "waitMs": 60001})
		e.refused(workspace.ErrInvalid, "readProcessOutput", map[string]any{"id": p.ID, "waitMs": -1})
	})
	t.Run("same policy as runCommand", func(t *testing.T) {
		e := e.sub(t)
		e.refused(workspace.ErrCommand, "startProcess", map[string]any{"command": "/bin/sh"})
		e.refused(workspace.ErrPolicy, "startProcess", map[string]any{"command": "true", "options": map[string]any{"env": map[string]string{"LD_PRELOAD": "x"}}})
		e.refused(workspace.ErrTraversal, "startProcess", map[string]any{"command": "true", "options": map[string]any{"cwd": "/tmp"}})
	})
	t.Run("missing program", func(t *testing.T) {
		e := e.sub(t)
		e.failed("startProcess", map[string]any{"command": "no-such-program-cws"})
	})
}
