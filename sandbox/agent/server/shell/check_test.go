package shell

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestCheckArgv is the exec handler's check of a command line it is about to start:
// every word is known, and the program a wrapper would run is checked too.
func TestCheckArgv(t *testing.T) {
	pol := Policy{
		Allowed:      []string{"env", "xargs", "find", "nice", "timeout", "nohup", "stdbuf", "setsid", "time", "sh", "bash", "ls", "echo", "grep"},
		EnvAllowlist: []string{"FOO"},
	}
	for _, tc := range []struct {
		argv    string
		refused string // the program named in the refusal; "" when allowed
	}{
		{"ls -la", ""},
		{"rm -rf x", "rm"},
		{"/bin/ls", "/bin/ls"},
		{"bin/ls", "bin/ls"},
		{"env", ""},
		{"env ls", ""},
		{"env FOO=1 ls", ""},
		{"env BAR=1 ls", "env"},
		{"env LD_PRELOAD=/x.so ls", "env"},
		{"env PATH=/workspace ls", "env"},
		{"env -i FOO=1 rm", "rm"},
		{"env -u FOO -C sub ls", ""},
		{"env --unset=FOO rm", "rm"},
		{"env - rm", "rm"},
		{"env -S rm", "env"},
		{"env --frob ls", "env"},
		{"xargs", ""},
		{"xargs ls", ""},
		{"xargs rm", "rm"},
		{"xargs -0 -n 1 -P4 rm", "rm"},
		{"xargs -n1 ls", ""},
		{"xargs --max-args=1 rm", "rm"},
		{"xargs --max-args 1 rm", "rm"},
		{"xargs -I {} rm {}", "rm"},
		{"xargs -I{} {} x", "{}"},
		{"xargs -I X echo X", ""},
		{"xargs -IX X", "X"},
		{"xargs -i {}", "{}"},
		{"xargs env", "env"},
		{"xargs nice", "nice"},
		{"xargs timeout 5", "timeout"},
		{"xargs find", "find"},
		{"xargs sh -c 'ls'", "sh"},
		{"xargs --frob ls", "xargs"},
		{"find . -name x", ""},
		{"find . -exec ls {} ;", ""},
		{"find . -exec rm {} ;", "rm"},
		{"find . -execdir rm {} +", "rm"},
		{"find . -ok rm {} ;", "rm"},
		{"find . -exec ls ; -okdir rm {} ;", "rm"},
		{"find . -exec {} ;", "{}"},
		{"find . -exec env {} ;", "env"},
		{"find . -exec bash -c x ;", "bash"},
		{"find . -exec", "find"},
		{"nice rm", "rm"},
		{"nice -n 5 rm", "rm"},
		{"nice -5 rm", "rm"},
		{"nice --adjustment=5 ls", ""},
		{"nice", ""},
		{"nohup rm", "rm"},
		{"stdbuf -oL rm", "rm"},
		{"stdbuf -o L ls", ""},
		{"setsid -f rm", "rm"},
		{"time -p rm", "rm"},
		{"time -o out -f %e ls", ""},
		{"timeout 1 rm", "rm"},
		{"timeout -k 1 -s KILL 1 rm", "rm"},
		{"timeout --signal=KILL 1s ls", ""},
		{"timeout --help", ""},
		{"env FOO=1 nice -n1 timeout 5 stdbuf -oL nohup setsid rm", "rm"},
		{"env FOO=1 nice -n1 timeout 5 sh -c x", ""}, // interpreted in-process
		{"grep -r x", ""},
	} {
		err := checker{pol: pol}.argv(knownWords(strings.Fields(tc.argv)), false, false)
		var na *NotAllowed
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%q: refused: %v", tc.argv, err)
		case tc.refused != "" && (!errors.As(err, &na) || na.Program != tc.refused):
			t.Errorf("%q: got %v, want %q refused", tc.argv, err, tc.refused)
		}
	}

	t.Run("nil Allowed allows any bare name, never a path", func(t *testing.T) {
		c := checker{pol: Policy{}}
		if err := c.argv(knownWords([]string{"rm", "x"}), false, false); err != nil {
			t.Fatal(err)
		}
		if err := c.argv(knownWords([]string{"./rm"}), false, false); err == nil {
			t.Fatal("./rm allowed")
		}
		if err := c.argv(knownWords([]string{"env", "./rm"}), false, false); err == nil {
			t.Fatal("env ./rm allowed")
		}
	})
	t.Run("empty Allowed allows nothing", func(t *testing.T) {
		if err := (checker{pol: Policy{Allowed: []string{}}}).argv(knownWords([]string{"ls"}), false, false); err == nil {
			t.Fatal("ls allowed")
		}
	})
}

func TestPeel(t *testing.T) {
	p, ok := peel(strings.Fields("env -i A=1 nice -n 3 timeout -s KILL 2.5 bash -e -c x"))
	if !ok || !p.clear || p.env["A"] != "1" || p.timeout != 2500*time.Millisecond || strings.Join(p.argv, " ") != "bash -e -c x" {
		t.Fatalf("%+v %v", p, ok)
	}
	if _, ok := peel(strings.Fields("nice ls")); ok {
		t.Fatal("ls is not a shell")
	}
}

func TestParseShellArgs(t *testing.T) {
	for _, tc := range []struct {
		args, script, file, arg0, params, opts string
	}{
		{args: "-c x", script: "x"},
		{args: "-ec x a b c", script: "x", arg0: "a", params: "b c", opts: "-e"},
		{args: "-o pipefail -c x", script: "x", opts: "-o pipefail"},
		{args: "--norc -x s.sh 1 2", file: "s.sh", params: "1 2", opts: "-x"},
		{args: "-s"},
	} {
		inv, err := parseShellArgs(strings.Fields(tc.args))
		if err != nil || inv.script != tc.script || inv.file != tc.file || inv.arg0 != tc.arg0 ||
			strings.Join(inv.args, " ") != tc.params || strings.Join(inv.opts, " ") != tc.opts {
			t.Errorf("%q: %+v %v", tc.args, inv, err)
		}
	}
	if _, err := parseShellArgs([]string{"-c"}); err == nil {
		t.Error("-c without a script")
	}
}
