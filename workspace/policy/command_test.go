package policy

import (
	"errors"
	"testing"
)

func TestCheckCommand(t *testing.T) {
	only := mustParse(t, `{"allowedCommands": ["python3", "make"]}`, "")
	anyCmd := mustParse(t, `{}`, "")
	none := mustParse(t, `{"allowedCommands": []}`, "")
	tests := []struct {
		name string
		e    *Effective
		cmd  string
		want error
	}{
		{"allowed", only, "python3", nil},
		{"allowed too", only, "make", nil},
		{"not listed", only, "curl", ErrCommand},
		{"absolute path to an allowed name", only, "/usr/bin/python3", ErrCommand},
		{"relative path to an allowed name", only, "./python3", ErrCommand},
		{"workspace binary", only, "bin/python3", ErrCommand},
		{"shell wrapper", only, "sh", ErrCommand},
		{"bash", only, "bash", ErrCommand},
		{"env wrapper", only, "env", ErrCommand},
		{"with arguments", only, "python3 -c x", ErrCommand},
		{"trailing space", only, "python3 ", ErrCommand},
		{"case differs", only, "Python3", ErrCommand},
		{"prefix", only, "python", ErrCommand},
		{"NUL", only, "python3\x00", ErrCommand},
		{"empty", only, "", ErrInvalid},
		{"unrestricted", anyCmd, "bash", nil},
		{"unrestricted still bare names only", anyCmd, "/bin/sh", ErrCommand},
		{"unrestricted dot", anyCmd, ".", ErrCommand},
		{"explicit none", none, "python3", ErrCommand},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.e.CheckCommand(tt.cmd)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("CheckCommand(%q) = %v, want %v", tt.cmd, err, tt.want)
			}
		})
	}
}
