package policy

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func mustParse(t *testing.T, tenant, ws string) *Effective {
	t.Helper()
	tp, err := Parse([]byte(tenant))
	if err != nil {
		t.Fatalf("Parse(%s): %v", tenant, err)
	}
	if ws == "" {
		return tp.Narrow(nil)
	}
	wp, err := ParseWorkspace([]byte(ws))
	if err != nil {
		t.Fatalf("ParseWorkspace(%s): %v", ws, err)
	}
	return tp.Narrow(wp)
}

func TestNarrowSizes(t *testing.T) {
	tests := []struct {
		name, tenant, ws string
		file, edit       int64
	}{
		{"defaults", `{}`, "", DefaultMaxFileSize, DefaultMaxEditSize},
		{"tenant sets", `{"maxFileSize": 100, "maxEditSize": 10}`, "", 100, 10},
		{"workspace lowers", `{"maxFileSize": 100, "maxEditSize": 10}`, `{"maxFileSize": 50, "maxEditSize": 5}`, 50, 5},
		{"workspace cannot raise", `{"maxFileSize": 100, "maxEditSize": 10}`, `{"maxFileSize": 1000, "maxEditSize": 1000}`, 100, 10},
		{"workspace cannot raise the default", `{}`, `{"maxFileSize": 1073741824}`, DefaultMaxFileSize, DefaultMaxEditSize},
		{"workspace zero is no opinion", `{"maxFileSize": 100}`, `{"maxFileSize": 0}`, 100, DefaultMaxEditSize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := mustParse(t, tt.tenant, tt.ws)
			if e.MaxFileSize() != tt.file || e.MaxEditSize() != tt.edit {
				t.Errorf("sizes = %d, %d; want %d, %d", e.MaxFileSize(), e.MaxEditSize(), tt.file, tt.edit)
			}
		})
	}
}

func TestNarrowCommands(t *testing.T) {
	tests := []struct {
		name, tenant, ws string
		want             []string // nil: any
	}{
		{"any", `{}`, "", nil},
		{"any narrowed by workspace", `{}`, `{"allowedCommands": ["make"]}`, []string{"make"}},
		{"tenant list", `{"allowedCommands": ["python3", "make"]}`, "", []string{"python3", "make"}},
		{"intersection", `{"allowedCommands": ["python3", "make"]}`, `{"allowedCommands": ["make", "bash"]}`, []string{"make"}},
		{"workspace cannot widen", `{"allowedCommands": ["python3"]}`, `{"allowedCommands": ["python3", "sh"]}`, []string{"python3"}},
		{"workspace omitted keeps tenant", `{"allowedCommands": ["python3"]}`, `{}`, []string{"python3"}},
		{"explicit none", `{"allowedCommands": []}`, `{"allowedCommands": ["python3"]}`, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := mustParse(t, tt.tenant, tt.ws)
			got := e.AllowedCommands()
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("AllowedCommands() = %#v, want %#v", got, tt.want)
			}
			if tt.want != nil && e.CheckCommand("sh") == nil {
				t.Errorf("CheckCommand(sh) allowed under %v", tt.want)
			}
		})
	}
}

func TestNarrowPaths(t *testing.T) {
	const tenant = `{"allowedPaths": ["src/**", "docs/**"], "deniedPaths": ["**/.env"]}`
	tests := []struct {
		name, tenant, ws, rel string
		want                  error // nil, ErrPolicy or ErrTraversal
	}{
		{"tenant allows", tenant, "", "docs/a.md", nil},
		{"tenant refuses", tenant, "", "Makefile", ErrPolicy},
		{"workspace narrows", tenant, `{"allowedPaths": ["src/**"]}`, "docs/a.md", ErrPolicy},
		{"workspace keeps", tenant, `{"allowedPaths": ["src/**"]}`, "src/a.go", nil},
		{"workspace cannot widen", tenant, `{"allowedPaths": ["**"]}`, "Makefile", ErrPolicy},
		{"workspace adds denied", tenant, `{"deniedPaths": ["src/vendor/**"]}`, "src/vendor/x.go", ErrPolicy},
		{"tenant denied stays", tenant, `{"deniedPaths": []}`, "src/.env", ErrPolicy},
		{"root is listable", tenant, `{"allowedPaths": ["src/**"]}`, ".", nil},
		{"explicit empty allows nothing", `{}`, `{"allowedPaths": []}`, "a", ErrPolicy},
		{"not normalized", `{}`, "", "./a", ErrTraversal},
		{"seed example denies .git", seedExample, "", ".git/config", ErrPolicy},
		{"seed example denies node_modules", seedExample, "", "node_modules/a/b", ErrPolicy},
		{"seed example allows", seedExample, "", "src/main.py", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := mustParse(t, tt.tenant, tt.ws).CheckRead(tt.rel)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("CheckRead(%q) = %v, want %v", tt.rel, err, tt.want)
			}
		})
	}
}

func TestNarrowEnvAndConfirmation(t *testing.T) {
	e := mustParse(t,
		`{"envAllowlist": ["HOME", "LANG", "LC_*"], "confirmationRequired": ["runCommand"]}`,
		`{"envAllowlist": ["HOME", "CI", "LC_ALL"], "confirmationRequired": ["writeFile"]}`)
	for name, want := range map[string]error{"HOME": nil, "LANG": ErrPolicy, "CI": ErrPolicy, "LC_ALL": nil, "LC_CTYPE": ErrPolicy} {
		if err := e.CheckEnv(map[string]string{name: "x"}); !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Errorf("CheckEnv(%s) = %v, want %v", name, err, want)
		}
	}
	if got := e.ConfirmationRequired(); !reflect.DeepEqual(got, []string{"runCommand", "writeFile"}) {
		t.Errorf("ConfirmationRequired() = %v", got)
	}
}

func TestDefaultNarrowsLikeEmpty(t *testing.T) {
	empty, err := Parse([]byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := Default().Narrow(nil), empty.Narrow(nil)
	for _, rel := range []string{".", "a", ".cws-policy.json", "x/y/z"} {
		if (a.CheckRead(rel) == nil) != (b.CheckRead(rel) == nil) || (a.CheckWrite(rel, 1) == nil) != (b.CheckWrite(rel, 1) == nil) {
			t.Errorf("Default and {} disagree on %q", rel)
		}
	}
	if a.MaxFileSize() != b.MaxFileSize() || a.MaxEditSize() != b.MaxEditSize() ||
		!reflect.DeepEqual(a.AllowedCommands(), b.AllowedCommands()) || !reflect.DeepEqual(a.env, b.env) {
		t.Errorf("Default().Narrow = %+v, {}.Narrow = %+v", a, b)
	}
	if (*Policy)(nil).Narrow(nil).CheckRead("a") != nil {
		t.Error("nil tenant should be Default()")
	}
}

func TestGuardIsACopy(t *testing.T) {
	e := mustParse(t, `{"allowedPaths": ["src/**"], "deniedPaths": [".env"]}`, "")
	g := e.Guard()
	g.Allow[0][0] = "**"
	g.Deny[0] = "nothing"
	if e.CheckRead(".env") == nil || e.CheckRead("Makefile") == nil {
		t.Error("mutating Guard() changed the Effective")
	}
	if err := e.Guard().CheckWrite(FileName); err == nil {
		t.Error("agent guard does not protect the policy file")
	}
}

func TestNarrowTerminals(t *testing.T) {
	e := (&Policy{}).Narrow(nil)
	if e.MaxTerminals() != DefaultMaxTerminals || e.TerminalIdle() != DefaultTerminalIdle.Std() {
		t.Fatalf("defaults: %d terminals, idle %s", e.MaxTerminals(), e.TerminalIdle())
	}
	e = (&Policy{MaxTerminals: 2, TerminalIdle: Duration(time.Minute)}).Narrow(&Policy{})
	if e.MaxTerminals() != 2 || e.TerminalIdle() != time.Minute {
		t.Fatalf("tenant's: %d terminals, idle %s", e.MaxTerminals(), e.TerminalIdle())
	}
}
