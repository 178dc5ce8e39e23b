package policy

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckEnv(t *testing.T) {
	// A tenant that allowlists the hooks anyway: they must still be refused.
	e := mustParse(t, `{"envAllowlist": ["HOME", "LANG", "LC_*", "PATH", "LD_PRELOAD", "GIT_*", "NODE_OPTIONS", "BASH_ENV", "FOO"]}`, "")
	star := mustParse(t, `{"envAllowlist": ["*"]}`, "")
	def := mustParse(t, `{}`, "")
	tests := []struct {
		name string
		e    *Effective
		env  map[string]string
		want error
		rule string
	}{
		{"none", e, nil, nil, ""},
		{"allowed", e, map[string]string{"HOME": "/home/u", "LANG": "C.UTF-8", "FOO": ""}, nil, ""},
		{"prefix entry", e, map[string]string{"LC_ALL": "C"}, nil, ""},
		{"not allowlisted", e, map[string]string{"SECRET": "x"}, ErrPolicy, "envAllowlist"},
		{"LD_PRELOAD even when allowlisted", e, map[string]string{"LD_PRELOAD": "/workspace/x.so"}, ErrPolicy, "envDenied"},
		{"LD_LIBRARY_PATH", star, map[string]string{"LD_LIBRARY_PATH": "/workspace"}, ErrPolicy, "envDenied"},
		{"GIT_CONFIG_COUNT", e, map[string]string{"GIT_CONFIG_COUNT": "1"}, ErrPolicy, "envDenied"},
		{"GIT_SSH_COMMAND", star, map[string]string{"GIT_SSH_COMMAND": "sh -c x"}, ErrPolicy, "envDenied"},
		{"NODE_OPTIONS", e, map[string]string{"NODE_OPTIONS": "--require /workspace/x.js"}, ErrPolicy, "envDenied"},
		{"BASH_ENV", e, map[string]string{"BASH_ENV": "/workspace/x"}, ErrPolicy, "envDenied"},
		{"BASH_FUNC_", star, map[string]string{"BASH_FUNC_ls%%": "() { x; }"}, ErrInvalid, ""},
		{"PYTHONPATH", star, map[string]string{"PYTHONPATH": "/workspace"}, ErrPolicy, "envDenied"},
		{"PATH is fixed", e, map[string]string{"PATH": "/workspace/bin:/usr/bin"}, ErrPolicy, "envDenied"},
		{"GLIBC_TUNABLES", star, map[string]string{"GLIBC_TUNABLES": "x"}, ErrPolicy, "envDenied"},
		{"star allows ordinary names", star, map[string]string{"CI": "true", "GOFLAGS": "-mod=mod"}, nil, ""},
		{"default allows HOME", def, map[string]string{"HOME": "/tmp", "TERM": "dumb"}, nil, ""},
		{"default refuses others", def, map[string]string{"AWS_SECRET_ACCESS_KEY": "x"}, ErrPolicy, "envAllowlist"},
		{"lower-case is another name", e, map[string]string{"ld_preload": "x"}, ErrPolicy, "envAllowlist"},
		{"bad name", star, map[string]string{"A=B": "x"}, ErrInvalid, ""},
		{"empty name", star, map[string]string{"": "x"}, ErrInvalid, ""},
		{"NUL in value", star, map[string]string{"CI": "a\x00b"}, ErrInvalid, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.e.CheckEnv(tt.env)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("CheckEnv(%v) = %v, want %v", tt.env, err, tt.want)
			}
			var v *Violation
			if err != nil && (!errors.As(err, &v) || v.Rule != tt.rule) {
				t.Errorf("CheckEnv(%v) = %#v, want rule %q", tt.env, err, tt.rule)
			}
			for name := range tt.env {
				if err != nil && tt.want == ErrPolicy && !strings.Contains(err.Error(), name) {
					t.Errorf("error %q does not name %s", err, name)
				}
			}
		})
	}
}

func TestEnvDenied(t *testing.T) {
	for _, name := range []string{"LD_PRELOAD", "LD_AUDIT", "GIT_EXEC_PATH", "GIT_CONFIG_KEY_0", "BASH_FUNC_x", "MALLOC_CHECK_", "IFS", "PS4", "PROMPT_COMMAND", "SHELLOPTS", "BASHOPTS", "ENV", "PERL5OPT", "RUBYOPT", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "GCONV_PATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONINSPECT", "PERL5LIB", "PERLLIB", "RUBYLIB", "NODE_PATH", "PATH"} {
		if !EnvDenied(name) {
			t.Errorf("EnvDenied(%s) = false", name)
		}
	}
	for _, name := range []string{"HOME", "LANG", "TERM", "CI", "GOPATH", "PYTHONUNBUFFERED", "LDFLAGS", "GITHUB_TOKEN"} {
		if EnvDenied(name) {
			t.Errorf("EnvDenied(%s) = true", name)
		}
	}
}
