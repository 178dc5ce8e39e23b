package terminal

import (
	"errors"
	"testing"

	"github.com/cwsdev/cws/workspace/policy"
)

func TestKeys(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"Enter"}, "\r"},
		{[]string{"Ctrl-C", "ctrl-d", "Tab"}, "\x03\x04\t"},
		{[]string{"Up", "Down", "Right", "Left", "Escape", "Backspace"}, "\x1b[A\x1b[B\x1b[C\x1b[D\x1b\x7f"},
		{[]string{"Home", "End", "PageUp", "PageDown"}, "\x1b[H\x1b[F\x1b[5~\x1b[6~"},
		{nil, ""},
	} {
		got, err := Keys(tc.names)
		if err != nil || string(got) != tc.want {
			t.Errorf("Keys(%q) = %q, %v; want %q", tc.names, got, err, tc.want)
		}
	}
	_, err := Keys([]string{"Enter", "Meta-X"})
	var v *policy.Violation
	if !errors.As(err, &v) || !errors.Is(err, policy.ErrInvalid) || v.Rule != "keys" {
		t.Fatalf("an unknown key: %v", err)
	}
}

func TestOpenRequest(t *testing.T) {
	pol, err := policy.Parse([]byte(`{"allowedCommands": ["bash", "python3"], "deniedPaths": ["secret/**"], "maxTerminals": 3, "terminalIdle": "5m"}`))
	if err != nil {
		t.Fatal(err)
	}
	eff := pol.Narrow(nil)
	g := eff.Guard()
	n := func(v int) *int { return &v }
	for _, tc := range []struct {
		name string
		o    Open
		err  error
		rule string
	}{
		{"defaults", Open{}, nil, ""},
		{"a command", Open{Command: "python3", Args: []string{"-q"}, Cols: n(120), Rows: n(40)}, nil, ""},
		{"cols 0", Open{Cols: n(0)}, policy.ErrInvalid, "cols"},
		{"rows over 1000", Open{Rows: n(1001)}, policy.ErrInvalid, "rows"},
		{"negative cols", Open{Cols: n(-3)}, policy.ErrInvalid, "cols"},
		{"not allowed", Open{Command: "rm"}, policy.ErrCommand, "allowedCommands"},
		{"args alone", Open{Args: []string{"x"}}, policy.ErrInvalid, "args"},
		{"a denied cwd", Open{Cwd: "secret/x"}, policy.ErrPolicy, ""},
		{"a cwd out of the workspace", Open{Cwd: "../etc"}, policy.ErrTraversal, ""},
		{"a forbidden variable", Open{Env: map[string]string{"LD_PRELOAD": "x"}}, policy.ErrPolicy, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := tc.o.Request(eff, &g)
			if tc.err == nil {
				if err != nil {
					t.Fatal(err)
				}
				if a.Max != 3 || a.IdleMS != 300000 || a.Launch == nil || a.Guard != &g {
					t.Fatalf("request: %+v", a)
				}
				if tc.o.Command == "" && (len(a.Argv) != 0 || len(a.Shells) != 1 || a.Shells[0] != "bash") {
					t.Fatalf("the default shell: argv %q, shells %q (sh is not allowed)", a.Argv, a.Shells)
				}
				return
			}
			var v *policy.Violation
			if !errors.Is(err, tc.err) || (tc.rule != "" && (!errors.As(err, &v) || v.Rule != tc.rule)) {
				t.Fatalf("got %v, want %v rule %q", err, tc.err, tc.rule)
			}
		})
	}
}
