package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
)

// term runs one command in the default terminal.
func term(t *testing.T, c *agent.Client, a agent.TermRunArgs) (agent.TermRunResult, error) {
	t.Helper()
	return c.TermRun(ctxT(t), a, nil)
}

func mustTerm(t *testing.T, c *agent.Client, a agent.TermRunArgs) agent.TermRunResult {
	t.Helper()
	res, err := term(t, c, a)
	if err != nil {
		t.Fatalf("%q: %v", a.Command, err)
	}
	return res
}

func TestTerminalKeepsItsState(t *testing.T) {
	c, dir, _ := pipeAgent(t)
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	res := mustTerm(t, c, agent.TermRunArgs{Command: `cd sub && export FOO=bar && X=1 && f() { echo "hi-$1"; }; set -o pipefail`})
	if res.ExitCode != 0 || res.Cwd != "sub" {
		t.Fatalf("first run: exit %d, cwd %q: %s", res.ExitCode, res.Cwd, res.Stdout)
	}
	res = mustTerm(t, c, agent.TermRunArgs{Command: `pwd; echo "$FOO $X"; f there; false | true; echo "pipefail $?"`})
	want := filepath.Join(dir, "sub") + "\nbar 1\nhi-there\npipefail 1\n"
	if string(res.Stdout) != want || res.Cwd != "sub" {
		t.Fatalf("second run: got %q in %q, want %q", res.Stdout, res.Cwd, want)
	}
	info, err := c.TermInfo(ctxT(t), agent.TermIDArgs{})
	if err != nil || info.Cwd != "sub" || info.OSType != "Linux" || !info.Open || info.Shell == "" || info.OSVersion == "" {
		t.Fatalf("info: %+v %v", info, err)
	}
	// Another terminal is another shell.
	res = mustTerm(t, c, agent.TermRunArgs{ID: "other", Command: `echo "[$FOO]"; pwd`})
	if string(res.Stdout) != "[]\n"+dir+"\n" {
		t.Fatalf("other terminal: %q", res.Stdout)
	}
	// exit starts a fresh shell.
	res = mustTerm(t, c, agent.TermRunArgs{Command: `exit 4`})
	if !res.Exited || res.ExitCode != 4 {
		t.Fatalf("exit: %+v", res)
	}
	res = mustTerm(t, c, agent.TermRunArgs{Command: `echo "[$FOO]"; pwd`})
	if string(res.Stdout) != "[]\n"+dir+"\n" || res.Cwd != "." {
		t.Fatalf("after exit: %q in %q", res.Stdout, res.Cwd)
	}
}

func TestTerminalScrollback(t *testing.T) {
	c, _, _ := pipeAgent(t)
	first := mustTerm(t, c, agent.TermRunArgs{Command: `echo one; echo two >&2`})
	second := mustTerm(t, c, agent.TermRunArgs{Command: `printf 'three\n'; cat /dev/null nonexistent`})
	if first.Offset != 0 || second.Offset != first.NextOffset || string(first.Stdout) != "one\ntwo\n" {
		t.Fatalf("offsets: first %+v %q, second %+v", first, first.Stdout, second)
	}
	if second.ExitCode != 1 || !strings.HasPrefix(string(second.Stdout), "three\n") {
		t.Fatalf("second: exit %d %q", second.ExitCode, second.Stdout)
	}
	all, err := c.TermRead(ctxT(t), agent.TermReadArgs{})
	if err != nil || !strings.HasPrefix(string(all.Data), "one\ntwo\nthree\n") || all.NextOffset != second.NextOffset || all.Running {
		t.Fatalf("read all: %q %+v %v", all.Data, all, err)
	}
	part, err := c.TermRead(ctxT(t), agent.TermReadArgs{Offset: first.NextOffset, Limit: 3})
	if err != nil || string(part.Data) != "thr" || part.Offset != first.NextOffset || part.NextOffset != first.NextOffset+3 {
		t.Fatalf("read from an offset: %q %+v %v", part.Data, part, err)
	}
	var events strings.Builder
	res, err := c.TermRun(ctxT(t), agent.TermRunArgs{Command: `echo streamed`, Stream: true}, func(ev string, p []byte) error {
		events.WriteString(ev + ":" + string(p)) // the echo builtin writes its newline apart
		return nil
	})
	if err != nil || events.String() != "stdout:streamedstdout:\n" || string(res.Stdout) != "streamed\n" {
		t.Fatalf("streamed %q, result %q, %v", events.String(), res.Stdout, err)
	}
	// A job started with & belongs to its run: the run does not wait for it.
	start := time.Now()
	res = mustTerm(t, c, agent.TermRunArgs{Command: `sleep 30 & echo started`})
	if d := time.Since(start); d > 10*time.Second || !strings.Contains(string(res.Stdout), "started") {
		t.Fatalf("background job: %q after %v", res.Stdout, d)
	}
	if _, err := c.TermRead(ctxT(t), agent.TermReadArgs{ID: "nope"}); !errors.Is(err, agent.ErrNotFound) {
		t.Fatalf("unknown terminal: %v", err)
	}
}

// allowed is a policy that permits the wrappers, so that the program beneath them decides.
var allowed = []string{"cat", "echo", "ls", "sh", "bash", "env", "xargs", "find", "nice", "timeout", "nohup", "stdbuf", "setsid", "true", "sleep"}

func TestTerminalRefusesWhatPolicyDoesNot(t *testing.T) {
	c, dir, _ := pipeAgent(t)
	marker := filepath.Join(dir, "m")

	// Control: with no allowlist, touch runs, so a missing marker below means refused.
	mustTerm(t, c, agent.TermRunArgs{Command: `touch m`})
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("touch did not run unrestricted: %v", err)
	}
	os.Remove(marker)

	for _, tc := range []struct{ name, cmd, program string }{
		{"plain", `touch m`, "touch"},
		{"after an allowed command", `echo first > first.txt; touch m`, "touch"},
		{"pipeline", `echo x | touch m`, "touch"},
		{"command substitution", `echo "$(touch m)"`, "touch"},
		{"backticks", "echo `touch m`", "touch"},
		{"subshell", `(touch m)`, "touch"},
		{"function", `f() { touch m; }; f`, "touch"},
		{"function defined earlier", `g`, "touch"},
		{"sh -c", `sh -c 'touch m'`, "touch"},
		{"bash -c", `bash -c 'echo ok; touch m'`, "touch"},
		{"sh reading stdin", `echo 'touch m' | sh`, "touch"},
		{"sh -c built at run time", `sh -c "$(echo touch) m"`, "touch"},
		{"env", `env X=1 touch m`, "touch"},
		{"xargs", `echo m | xargs touch`, "touch"},
		{"xargs -I", `echo m | xargs -I{} touch {}`, "touch"},
		{"find -exec", `find . -maxdepth 0 -exec touch m {} \;`, "touch"},
		{"find -execdir +", `find . -maxdepth 0 -execdir touch m {} +`, "touch"},
		{"nice", `nice touch m`, "touch"},
		{"nice -n", `nice -n 5 touch m`, "touch"},
		{"timeout", `timeout 1 touch m`, "touch"},
		{"timeout with options", `timeout -k 1 -s TERM 1 touch m`, "touch"},
		{"nohup", `nohup touch m`, "touch"},
		{"nested wrappers", `env A=1 nice timeout 5 touch m`, "touch"},
		{"timeout sh -c", `timeout 5 sh -c 'touch m'`, "touch"},
		{"variable", `p=touch; $p m`, "touch"},
		{"eval", `eval 'touch m'`, "touch"},
		{"command", `command touch m`, "touch"},
		{"exec", `exec touch m`, "touch"},
		{"builtin-looking name", `builtin touch m`, ""},
		{"trap", `trap 'touch m' EXIT; exit 0`, "touch"},
		{"absolute path", `/usr/bin/touch m`, "/usr/bin/touch"},
		{"relative path", `./touch m`, "./touch"},
		{"xargs -I program", `echo touch | xargs -I{} {} m`, "{}"},
		{"xargs env from input", `echo touch m | xargs env`, "env"},
		{"find -exec program from names", `find . -exec {} \;`, "{}"},
		{"shell under xargs", `echo m | xargs sh -c 'touch "$1"' _`, "sh"},
		{"shell under find", `find . -maxdepth 0 -exec sh -c 'touch m' \;`, "sh"},
		{"env -S", `env -S 'touch m'`, "env"},
		{"unknown wrapper option", `timeout --frobnicate 1 touch m`, "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "function defined earlier" {
				mustTerm(t, c, agent.TermRunArgs{Command: `g() { touch m; }`, Allowed: allowed})
			}
			res, err := term(t, c, agent.TermRunArgs{Command: tc.cmd, Allowed: allowed})
			if tc.program == "" { // "builtin touch" is not a builtin: it fails, it does not run
				if err != nil || res.ExitCode == 0 {
					t.Fatalf("got %+v, %v", res, err)
				}
			} else {
				var we *agent.WireError
				if !errors.As(err, &we) || !errors.Is(err, agent.ErrCommand) || we.Path != tc.program {
					t.Fatalf("got %+v, %v; want a %s refusal of %q", res, err, agent.CodeCommand, tc.program)
				}
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the refused program ran")
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "first.txt")); err == nil {
		t.Fatal("a script with a refused literal program started its first command")
	}

	// The terminal is still usable, and allowed programs run in every form.
	for _, cmd := range []string{
		`echo hi | cat`,
		`sh -c 'echo "$0-$1"' hi there | cat`, // $0 is "hi"
		`x=$(echo hi); echo "$x"`,
		`echo hi | xargs echo`,
		`find . -maxdepth 0 -exec echo hi \;`,
		`timeout 5 sh -c 'echo hi'`,
		`nice -n 1 echo hi`,
		`env sh -c 'echo hi'`,
		`echo 'echo "$0-$1"' > s.sh; sh s.sh hi`,
	} {
		res, err := term(t, c, agent.TermRunArgs{Command: cmd, Allowed: allowed})
		if err != nil || !strings.Contains(string(res.Stdout), "hi") {
			t.Errorf("%q: %q, %v", cmd, res.Stdout, err)
		}
	}
}

func TestTerminalPaths(t *testing.T) {
	c, dir, _ := pipeAgent(t)
	for _, d := range []string{"sub", "secret"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, ".env"), []byte("TOKEN=x\n"), 0o644)
	os.WriteFile(filepath.Join(dir, ".cws-policy.json"), []byte("{}\n"), 0o644)
	os.Symlink("/", filepath.Join(dir, "out"))
	os.Symlink(".env", filepath.Join(dir, "env-link"))
	g := &guard.Guard{Deny: []string{".env", "secret/**"}, Protect: []string{".cws-policy.json"}}

	for _, tc := range []struct {
		name, cmd string
		want      error
	}{
		{"write to a denied file", `echo x > .env`, agent.ErrDenied},
		{"append to a denied file", `echo x >> .env`, agent.ErrDenied},
		{"read a denied file", `read line < .env`, agent.ErrDenied},
		{"read through a link", `cat < env-link`, agent.ErrDenied},
		{"command substitution of a file", `x=$(<.env)`, agent.ErrDenied},
		{"create in a denied directory", `echo x > secret/new`, agent.ErrDenied},
		{"write a protected file", `echo x > .cws-policy.json`, agent.ErrDenied},
		{"source a denied file", `. ./.env`, agent.ErrDenied},
		{"sh reading a denied file", `sh .env`, agent.ErrDenied},
		{"write outside", `echo x > /etc/cws-terminal-test`, agent.ErrTraversal},
		{"write outside through a link", `echo x > out/tmp/cws-terminal-test`, agent.ErrTraversal},
		{"cd ..", `cd ..`, agent.ErrTraversal},
		{"cd /", `cd /`, agent.ErrTraversal},
		{"cd through a link", `cd out`, agent.ErrTraversal},
		{"cd into a denied directory", `cd secret`, agent.ErrDenied},
		{"cd - to a forged OLDPWD", `OLDPWD=/etc; cd -`, agent.ErrTraversal},
		{"pushd out", `pushd /etc`, agent.ErrTraversal},
		{"env -C out", `env -C / sh -c 'echo hi'`, agent.ErrTraversal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := term(t, c, agent.TermRunArgs{Command: tc.cmd, Guard: g})
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %+v, %v; want %v", res, err, tc.want)
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".env")); string(b) != "TOKEN=x\n" {
		t.Fatalf(".env changed: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".cws-policy.json")); string(b) != "{}\n" {
		t.Fatalf("the protected file changed: %q", b)
	}
	for _, p := range []string{filepath.Join(dir, "secret", "new"), "/etc/cws-terminal-test", "/tmp/cws-terminal-test"} {
		if _, err := os.Lstat(p); err == nil {
			t.Fatalf("%s was created", p)
		}
	}
	res := mustTerm(t, c, agent.TermRunArgs{Command: `pwd`, Guard: g})
	if res.Cwd != "." {
		t.Fatalf("a refused cd moved the terminal to %q", res.Cwd)
	}

	tmp := filepath.Join("/tmp", "cws-terminal-"+strconv.Itoa(os.Getpid()))
	t.Cleanup(func() { os.Remove(tmp) })
	for _, cmd := range []string{
		`echo no > /dev/null && echo ok`,
		`echo ok > sub/file; cat < sub/file`,
		`echo ok > ` + tmp + `; read x < ` + tmp + `; echo "$x"`,
		`echo ok > /dev/stderr`,
		`cd sub && cd .. && cd sub/.. && echo ok`,
		`cat < .cws-policy.json && echo ok`,
	} {
		res, err := term(t, c, agent.TermRunArgs{Command: cmd, Guard: g})
		if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "ok") {
			t.Errorf("%q: %+v %q, %v", cmd, res, res.Stdout, err)
		}
	}
	res = mustTerm(t, c, agent.TermRunArgs{Command: `cd sub; cd; pwd`, Guard: g})
	if res.Cwd != "." {
		t.Fatalf("cd without an operand went to %q", res.Cwd)
	}
}

func TestTerminalEnvironment(t *testing.T) {
	c, _, _ := pipeAgent(t)
	res := mustTerm(t, c, agent.TermRunArgs{
		Command:      `export FOO=1 BAR=2 LD_PRELOAD=/x.so BASH_ENV=/x; PATH=/nowhere; HOME=/elsewhere; env`,
		EnvAllowlist: []string{"FOO", "LD_PRELOAD", "BASH_ENV"},
	})
	env := string(res.Stdout)
	for _, want := range []string{"FOO=1\n", "PATH=" + agent.SafePath + "\n", "HOME=/tmp\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("missing %q in\n%s", want, env)
		}
	}
	for _, not := range []string{"BAR=", "LD_PRELOAD", "BASH_ENV", "/nowhere", "/elsewhere"} {
		if strings.Contains(env, not) {
			t.Errorf("%q reached the program:\n%s", not, env)
		}
	}
	// The shell itself still sees its variables.
	if res := mustTerm(t, c, agent.TermRunArgs{Command: `echo "$BAR"`}); string(res.Stdout) != "2\n" {
		t.Fatalf("shell variable: %q", res.Stdout)
	}
	// A nil allowlist passes nothing beyond the base environment.
	res = mustTerm(t, c, agent.TermRunArgs{Command: `FOO=1 env`})
	if strings.Contains(string(res.Stdout), "FOO=") {
		t.Fatalf("FOO passed with no allowlist:\n%s", res.Stdout)
	}
	// env would set what the allowlist refuses.
	for _, cmd := range []string{`env BAR=2 true`, `env LD_PRELOAD=/x.so true`, `env PATH=/workspace true`} {
		if _, err := term(t, c, agent.TermRunArgs{Command: cmd, EnvAllowlist: []string{"FOO", "LD_PRELOAD", "PATH"}}); !errors.Is(err, agent.ErrCommand) {
			t.Errorf("%q: %v", cmd, err)
		}
	}
	// Variables the host set for the terminal reach its programs.
	res = mustTerm(t, c, agent.TermRunArgs{ID: "withenv", Command: `env`, Env: map[string]string{"GOFLAGS": "-mod=mod"}})
	if !strings.Contains(string(res.Stdout), "GOFLAGS=-mod=mod\n") {
		t.Fatalf("host env missing:\n%s", res.Stdout)
	}
}

func TestTerminalTimeoutKills(t *testing.T) {
	c, dir, _ := pipeAgent(t)
	start := time.Now()
	res := mustTerm(t, c, agent.TermRunArgs{Command: `sleep 30; touch after`, TimeoutMS: 300})
	if !res.TimedOut || res.ExitCode != -1 {
		t.Fatalf("got %+v", res)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("the timeout took %v", d)
	}
	if _, err := os.Stat(filepath.Join(dir, "after")); err == nil {
		t.Fatal("the script went on after the timeout")
	}
	// The terminal survives its command's timeout.
	if res := mustTerm(t, c, agent.TermRunArgs{Command: `echo alive`}); string(res.Stdout) != "alive\n" {
		t.Fatalf("after timeout: %q", res.Stdout)
	}
	// Cancelling the call kills the command too.
	ctx, cancel := context.WithCancel(ctxT(t))
	go func() { time.Sleep(300 * time.Millisecond); cancel() }()
	start = time.Now()
	if _, err := c.TermRun(ctx, agent.TermRunArgs{Command: `sleep 30`}, nil); err == nil {
		t.Fatal("a cancelled call succeeded")
	}
	res = mustTerm(t, c, agent.TermRunArgs{Command: `echo alive`})
	if d := time.Since(start); d > 15*time.Second || string(res.Stdout) != "alive\n" {
		t.Fatalf("after cancel: %q after %v", res.Stdout, d)
	}
}

func TestTerminalBackground(t *testing.T) {
	c, dir, _ := pipeAgent(t)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	var streamed strings.Builder
	res, err := c.TermRun(ctxT(t), agent.TermRunArgs{
		Command: `echo out; echo err >&2; cd ../..; exit 3`, Background: true, Cwd: "sub",
	}, nil)
	if !errors.Is(err, agent.ErrTraversal) {
		t.Fatalf("cd .. in a background run: %+v %v", res, err)
	}
	res, err = c.TermRun(ctxT(t), agent.TermRunArgs{
		Command: `pwd; echo err >&2; exit 3`, Background: true, Cwd: "sub", Stream: true,
	}, func(ev string, p []byte) error {
		if ev == agent.EventStderr {
			streamed.Write(p)
		}
		return nil
	})
	if err != nil || res.ExitCode != 3 || string(res.Stdout) != filepath.Join(dir, "sub")+"\n" || string(res.Stderr) != "err\n" {
		t.Fatalf("got %+v (%q, %q), %v", res, res.Stdout, res.Stderr, err)
	}
	if streamed.String() != "err\n" {
		t.Fatalf("streamed: %q", streamed.String())
	}
	if info, _ := c.TermInfo(ctxT(t), agent.TermIDArgs{}); info.Open {
		t.Fatal("a background run opened the default terminal")
	}
}
