package policy

import (
	"errors"
	"testing"
)

func TestCheckDeniedSpellings(t *testing.T) {
	for _, deny := range []string{`**/.env`, `.env`} {
		e := mustParse(t, `{"deniedPaths": ["`+deny+`"]}`, "")
		for _, p := range []string{".env", "./.env", "x/../.env", "/workspace/.env", ".env/", "/workspace//x/../.env"} {
			t.Run(deny+"/"+p, func(t *testing.T) {
				rel, err := Normalize(".", p)
				if err != nil {
					t.Fatalf("Normalize(%q): %v", p, err)
				}
				err = e.CheckRead(rel)
				var v *Violation
				if !errors.Is(err, ErrPolicy) || !errors.As(err, &v) || v.Path != ".env" {
					t.Fatalf("CheckRead(%q) = %v, want ErrPolicy on .env", rel, err)
				}
				if want := `deniedPaths "` + deny + `"`; v.Rule != want {
					t.Errorf("rule = %s, want %s", v.Rule, want)
				}
			})
		}
	}
	e := mustParse(t, `{"deniedPaths": ["**/.env"]}`, "")
	rel, _ := Normalize("", "dir//.env")
	if err := e.CheckRead(rel); !errors.Is(err, ErrPolicy) {
		t.Errorf("dir//.env (%q) = %v, want ErrPolicy", rel, err)
	}
}

func TestCheckWrite(t *testing.T) {
	const size = 100
	tests := []struct {
		name, tenant, ws, rel string
		size                  int64
		want                  error
	}{
		{"ok", `{"maxFileSize": 100}`, "", "a.txt", 1, nil},
		{"exactly max", `{"maxFileSize": 100}`, "", "a.txt", size, nil},
		{"max+1", `{"maxFileSize": 100}`, "", "a.txt", size + 1, ErrTooLarge},
		{"workspace max+1", `{"maxFileSize": 1000}`, `{"maxFileSize": 100}`, "a.txt", size + 1, ErrTooLarge},
		{"default max+1", `{}`, "", "a.txt", DefaultMaxFileSize + 1, ErrTooLarge},
		{"default exactly max", `{}`, "", "a.txt", DefaultMaxFileSize, nil},
		{"negative", `{}`, "", "a.txt", -1, ErrInvalid},
		{"policy file protected", `{}`, "", FileName, 1, ErrPolicy},
		{"policy file protected under workspace file", `{}`, `{}`, FileName, 1, ErrPolicy},
		{"policy file writable when allowed", `{"allowPolicyWrites": true}`, "", FileName, 1, nil},
		{"nested name is not the policy file", `{}`, "", "sub/" + FileName, 1, nil},
		{"denied beats size", `{"deniedPaths": ["a.txt"]}`, "", "a.txt", 1 << 40, ErrPolicy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := mustParse(t, tt.tenant, tt.ws)
			err := e.CheckWrite(tt.rel, tt.size)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("CheckWrite(%q, %d) = %v, want %v", tt.rel, tt.size, err, tt.want)
			}
		})
	}
	// The policy file is still readable.
	if err := mustParse(t, `{}`, "").CheckRead(FileName); err != nil {
		t.Errorf("CheckRead(%s) = %v", FileName, err)
	}
}

func TestCheckEdit(t *testing.T) {
	e := mustParse(t, `{"maxEditSize": 10}`, `{"maxEditSize": 20}`)
	for _, tt := range []struct {
		size int64
		want error
	}{{0, nil}, {10, nil}, {11, ErrTooLarge}, {-1, ErrInvalid}} {
		if err := e.CheckEdit(tt.size); !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("CheckEdit(%d) = %v, want %v", tt.size, err, tt.want)
		}
	}
	if err := mustParse(t, `{}`, "").CheckEdit(DefaultMaxEditSize + 1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("CheckEdit(default+1) = %v", err)
	}
}

func TestCheckConfirmed(t *testing.T) {
	e := mustParse(t, `{"confirmationRequired": ["runCommand"]}`, `{"confirmationRequired": ["writeFile"]}`)
	tests := []struct {
		tool      string
		confirmed bool
		want      error
	}{
		{"runCommand", false, ErrConfirm},
		{"runCommand", true, nil},
		{"writeFile", false, ErrConfirm},
		{"readFile", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			if got := e.NeedsConfirmation(tt.tool); got != (tt.want != nil || tt.confirmed) {
				t.Errorf("NeedsConfirmation(%s) = %v", tt.tool, got)
			}
			err := e.CheckConfirmed(tt.tool, tt.confirmed)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("CheckConfirmed(%s, %v) = %v, want %v", tt.tool, tt.confirmed, err, tt.want)
			}
		})
	}
}

func TestViolationError(t *testing.T) {
	err := mustParse(t, `{"deniedPaths": [".env"]}`, "").CheckRead(".env")
	want := `policy violation: ".env": denied by rule deniedPaths ".env"`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
}
