package policy

import (
	"fmt"
	"slices"
	"strings"
)

// Variables a call may never set, whatever envAllowlist says. They make the dynamic
// loader, a shell or an interpreter run code the command line does not show, or they
// would undo the fixed PATH. The list is defence in depth for allowlisted commands
// (the container is the security boundary):
//
//   - the loader: LD_* (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, …), GLIBC_TUNABLES,
//     GCONV_PATH, GETCONF_DIR, HOSTALIASES, LOCALDOMAIN, LOCPATH, NIS_PATH, NLSPATH,
//     RES_OPTIONS, RESOLV_HOST_CONF, TMPDIR, TZDIR, MALLOC_* (glibc's secure-exec list)
//     and DYLD_*;
//   - shells: BASH_ENV, ENV, BASH_FUNC_* (exported functions), SHELLOPTS, BASHOPTS,
//     IFS, PS4, PROMPT_COMMAND, CDPATH, GLOBIGNORE;
//   - interpreters: PYTHONSTARTUP, PYTHONPATH, PYTHONHOME, PYTHONINSPECT,
//     PYTHONBREAKPOINT, PYTHONWARNINGS, PYTHONUSERBASE, PYTHONEXECUTABLE, PERL5OPT,
//     PERL5LIB, PERLLIB, PERL5DB, RUBYOPT, RUBYLIB, NODE_OPTIONS, NODE_PATH,
//     JAVA_TOOL_OPTIONS, _JAVA_OPTIONS, JDK_JAVA_OPTIONS, CLASSPATH;
//   - git and helpers it runs: GIT_* (GIT_CONFIG_COUNT/KEY_n/VALUE_n, GIT_SSH_COMMAND,
//     GIT_EXEC_PATH, GIT_DIR, …), EDITOR, VISUAL, PAGER, LESSOPEN, LESSCLOSE,
//     SSH_ASKPASS, BROWSER;
//   - PATH, which is always SafePath. (HOME is fine.)
var (
	deniedEnvPrefixes = []string{"LD_", "MALLOC_", "DYLD_", "BASH_FUNC_", "GIT_"}
	deniedEnvNames    = []string{
		"GLIBC_TUNABLES", "GCONV_PATH", "GETCONF_DIR", "HOSTALIASES", "LOCALDOMAIN",
		"LOCPATH", "NIS_PATH", "NLSPATH", "RES_OPTIONS", "RESOLV_HOST_CONF", "TMPDIR", "TZDIR",
		"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "IFS", "PS4", "PROMPT_COMMAND", "CDPATH",
		"GLOBIGNORE",
		"PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME", "PYTHONINSPECT", "PYTHONBREAKPOINT",
		"PYTHONWARNINGS", "PYTHONUSERBASE", "PYTHONEXECUTABLE",
		"PERL5OPT", "PERL5LIB", "PERLLIB", "PERL5DB", "RUBYOPT", "RUBYLIB",
		"NODE_OPTIONS", "NODE_PATH",
		"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH",
		"EDITOR", "VISUAL", "PAGER", "LESSOPEN", "LESSCLOSE", "SSH_ASKPASS", "BROWSER",
		"PATH",
	}
)

// EnvDenied reports whether name is one a call may never set (see deniedEnvNames).
func EnvDenied(name string) bool {
	if slices.Contains(deniedEnvNames, name) {
		return true
	}
	for _, p := range deniedEnvPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// CheckEnv reports whether a call may set the variables in env. A name that is not a
// portable variable name ([A-Za-z_][A-Za-z0-9_]*) or a value with a NUL byte is
// ErrInvalid; a name EnvDenied reports is ErrPolicy even when allowlisted; a name
// envAllowlist does not allow (tenant and workspace lists both) is ErrPolicy. The
// error names the variable; names are checked in sorted order, so the error is stable.
// Names are case-sensitive, as on Linux.
func (e *Effective) CheckEnv(env map[string]string) error {
	names := make([]string, 0, len(env))
	for name := range env {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		switch {
		case !isEnvName(name):
			return &Violation{Err: ErrInvalid, Detail: fmt.Sprintf("%q is not a variable name", name)}
		case strings.IndexByte(env[name], 0) >= 0:
			return &Violation{Err: ErrInvalid, Detail: fmt.Sprintf("variable %s contains a NUL byte", name)}
		case EnvDenied(name):
			return &Violation{Err: ErrPolicy, Rule: "envDenied",
				Detail: fmt.Sprintf("variable %s may never be set (loader, shell or interpreter hook, or the fixed PATH)", name)}
		}
		for _, list := range e.env {
			if !envAllowed(list, name) {
				return &Violation{Err: ErrPolicy, Rule: "envAllowlist",
					Detail: fmt.Sprintf("variable %s is not in envAllowlist", name)}
			}
		}
	}
	return nil
}

// envAllowed reports whether list allows name: an exact entry, or a "PREFIX*" entry.
func envAllowed(list []string, name string) bool {
	for _, entry := range list {
		if prefix, ok := strings.CutSuffix(entry, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if entry == name {
			return true
		}
	}
	return false
}

// EnvAllowlist returns the exact variable names every envAllowlist allows, without the
// names EnvDenied reports: what the terminal's shell may pass on to the programs it
// starts (it matches exact names only, so "PREFIX*" entries pass no variable there).
func (e *Effective) EnvAllowlist() []string {
	out := []string{}
	if len(e.env) == 0 {
		return out
	}
	for _, name := range e.env[0] {
		if strings.HasSuffix(name, "*") || EnvDenied(name) || slices.Contains(out, name) {
			continue
		}
		ok := true
		for _, list := range e.env[1:] {
			ok = ok && envAllowed(list, name)
		}
		if ok {
			out = append(out, name)
		}
	}
	return out
}
