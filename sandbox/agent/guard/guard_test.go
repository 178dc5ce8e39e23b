package guard

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestCheck(t *testing.T) {
	tenant := []string{"src/**", "docs/**", "README.md"}
	ws := []string{"src/**"}
	g := Guard{
		Allow:   [][]string{tenant, ws},
		Deny:    []string{"**/.env", "src/secret"},
		Protect: []string{".cws-policy.json", "src/gen/**"},
	}
	tests := []struct {
		name  string
		guard Guard
		rel   string
		read  string // "" allowed, else the expected Denied.Rule or "bad"
		write string
	}{
		{"zero guard allows all", Guard{}, "a/b", "", ""},
		{"root always allowed", g, ".", "", ""},
		{"in both sets", g, "src/main.go", "", ""},
		{"dir itself", g, "src", "", ""},
		{"tenant only", g, "docs/a.md", "allowedPaths", "allowedPaths"},
		{"neither", g, "Makefile", "allowedPaths", "allowedPaths"},
		{"denied at depth", g, "src/app/.env", `deniedPaths "**/.env"`, `deniedPaths "**/.env"`},
		{"denied below a denied dir", g, "src/secret/key", `deniedPaths "src/secret"`, `deniedPaths "src/secret"`},
		{"protected is readable", Guard{Protect: []string{".cws-policy.json"}}, ".cws-policy.json", "", `protected ".cws-policy.json"`},
		{"protected dir", g, "src/gen/x.go", "", `protected "src/gen/**"`},
		{"empty allow-set allows nothing", Guard{Allow: [][]string{{}}}, "a", "allowedPaths", "allowedPaths"},
		{"empty allow-set still allows root", Guard{Allow: [][]string{{}}}, ".", "", ""},
		{"invalid deny fails closed", Guard{Deny: []string{"[x"}}, "a", `deniedPaths "[x"`, `deniedPaths "[x"`},
		{"invalid protect fails closed", Guard{Protect: []string{"{x"}}, "a", "", `protected "{x"`},
		{"deny everything with .", Guard{Deny: []string{"."}}, "a/b", `deniedPaths "."`, `deniedPaths "."`},
		{"dot-files only", Guard{Deny: []string{".*"}}, ".", "", ""},
		{"backslash is a name character", Guard{Deny: []string{"**/.env"}}, `a\.env`, "", ""},
		{"empty", Guard{}, "", "bad", "bad"},
		{"absolute", Guard{}, "/etc/passwd", "bad", "bad"},
		{"parent", Guard{}, "../x", "bad", "bad"},
		{"dotdot", Guard{}, "..", "bad", "bad"},
		{"inner dotdot", Guard{}, "a/../.env", "bad", "bad"},
		{"dot slash", Guard{}, "./.env", "bad", "bad"},
		{"double slash", Guard{}, "dir//.env", "bad", "bad"},
		{"trailing slash", Guard{}, "dir/", "bad", "bad"},
		{"NUL", Guard{}, "a\x00b", "bad", "bad"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkResult(t, "Check", tt.rel, tt.guard.Check(tt.rel), tt.read)
			checkResult(t, "CheckWrite", tt.rel, tt.guard.CheckWrite(tt.rel), tt.write)
		})
	}
}

func checkResult(t *testing.T, fn, rel string, err error, want string) {
	t.Helper()
	switch want {
	case "":
		if err != nil {
			t.Errorf("%s(%q) = %v, want nil", fn, rel, err)
		}
	case "bad":
		if !errors.Is(err, ErrBadPath) || errors.Is(err, ErrDenied) {
			t.Errorf("%s(%q) = %v, want ErrBadPath only", fn, rel, err)
		}
	default:
		var d *Denied
		if !errors.As(err, &d) || !errors.Is(err, ErrDenied) {
			t.Fatalf("%s(%q) = %v, want *Denied", fn, rel, err)
		}
		if d.Rule != want || d.Path != rel {
			t.Errorf("%s(%q) = %+v, want rule %s", fn, rel, d, want)
		}
	}
}

func TestDeniedError(t *testing.T) {
	err := Guard{Deny: []string{".env"}}.Check(".env")
	want := `path ".env" denied by rule deniedPaths ".env"`
	if err == nil || err.Error() != want {
		t.Errorf("Check(.env) = %v, want %s", err, want)
	}
}

func TestGuardJSON(t *testing.T) {
	in := Guard{Allow: [][]string{{"**"}, {}}, Deny: []string{".git"}, Protect: []string{".cws-policy.json"}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Guard
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	// An empty allow-set must survive the trip to the agent: it allows nothing.
	if len(out.Allow) != 2 || out.Allow[1] == nil || out.Check("a") == nil {
		t.Errorf("round trip %s lost the empty allow-set: %+v", b, out)
	}
}
