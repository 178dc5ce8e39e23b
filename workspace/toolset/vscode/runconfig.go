package vscode

import (
	"context"
	"encoding/json"
	"errors"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/tailscale/hujson"
	"mvdan.cc/sh/v3/syntax"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/tool"
)

// A run configuration is what run_configuration starts as a background process. They
// come from four sources, in this order (the first of a name wins):
//
//   - .vscode/launch.json "configurations" (JSON with comments and trailing commas):
//     type go runs `go run PROGRAM ARGS…` (mode test: `go test PROGRAM ARGS…`), node
//     (and pwa-node) `RUNTIMEEXECUTABLE|node RUNTIMEARGS… PROGRAM ARGS…`, python (and
//     debugpy) `python3 PROGRAM ARGS…` or `python3 -m MODULE ARGS…`, shell `COMMAND`
//     (shell syntax, one simple command) or `sh PROGRAM ARGS…`;
//   - .vscode/tasks.json "tasks": type process runs COMMAND ARGS…, shell the shell
//     syntax COMMAND ARGS… (one simple command), npm `npm run SCRIPT`;
//   - Makefile targets, named "make TARGET", run `make TARGET`;
//   - package.json scripts, named "npm run SCRIPT", run `npm run SCRIPT`.
//
// ${workspaceFolder} is /workspace and ${file} the active file. Every program is held to
// allowedCommands and started through the launcher, like startProcess.
type runConfig struct {
	Name   string
	Source string // launch.json, tasks.json, Makefile, package.json
	Type   string // launch type (go, node, python, shell), task type, make or npm
	Group  string // a task's group: build, test
	Argv   []string
	Cwd    string // workspace-relative
	Env    map[string]string
	Err    string // why it cannot run (an unsupported type, a compound shell command)
}

// readOptional reads a workspace file as text; a missing file, or one the policy denies,
// is absent. Any other error (too large, binary, the agent) is an error.
func (c *call) readOptional(ctx context.Context, rel string) (string, bool, error) {
	text, err := c.readText(ctx, rel)
	if err == nil {
		return text, true, nil
	}
	if _, ok := tool.AsFailure(err); ok {
		return "", false, nil
	}
	var we *agent.WireError
	if errors.As(err, &we) && (we.Code == agent.CodeDenied || we.Code == agent.CodeTraversal) {
		return "", false, nil // denied, or a link out of the workspace: as if absent
	}
	var v *policy.Violation
	if errors.As(err, &v) && (errors.Is(err, policy.ErrPolicy) || errors.Is(err, policy.ErrTraversal)) {
		return "", false, nil
	}
	return "", false, err
}

// jsonc decodes JSON with comments and trailing commas, as VS Code reads its files.
func jsonc(text string, v any) error {
	b, err := hujson.Standardize([]byte(text))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// runConfigs lists the workspace's run configurations.
func (c *call) runConfigs(ctx context.Context) ([]runConfig, error) {
	active := ""
	if e, err := c.editor(ctx); err == nil && e.Active != "" {
		active = abs(e.Active)
	}
	var out []runConfig
	seen := map[string]bool{}
	add := func(rc runConfig) {
		if rc.Name != "" && !seen[rc.Name] {
			seen[rc.Name] = true
			out = append(out, rc)
		}
	}
	subst := func(s string) string {
		s = strings.ReplaceAll(s, "${workspaceFolder}", "/workspace")
		s = strings.ReplaceAll(s, "${workspaceRoot}", "/workspace")
		s = strings.ReplaceAll(s, "${workspaceFolderBasename}", "workspace")
		s = strings.ReplaceAll(s, "${file}", active)
		s = strings.ReplaceAll(s, "${fileDirname}", path.Dir(active))
		return envRef.ReplaceAllString(s, "")
	}
	cwdOf := func(s string) string {
		if s = subst(s); s == "" || s == "/workspace" {
			return "."
		}
		return strings.TrimPrefix(s, "/workspace/")
	}
	substAll := func(ss []string) []string {
		out := make([]string, len(ss))
		for i, s := range ss {
			out[i] = subst(s)
		}
		return out
	}
	substEnv := func(m map[string]string) map[string]string {
		if len(m) == 0 {
			return nil
		}
		out := map[string]string{}
		for k, v := range m {
			out[k] = subst(v)
		}
		return out
	}

	if text, ok, err := c.readOptional(ctx, ".vscode/launch.json"); err != nil {
		return nil, err
	} else if ok {
		var f struct {
			Configurations []struct {
				Name              string            `json:"name"`
				Type              string            `json:"type"`
				Request           string            `json:"request"`
				Mode              string            `json:"mode"`
				Program           string            `json:"program"`
				Module            string            `json:"module"`
				Command           string            `json:"command"`
				Args              []string          `json:"args"`
				RuntimeExecutable string            `json:"runtimeExecutable"`
				RuntimeArgs       []string          `json:"runtimeArgs"`
				Cwd               string            `json:"cwd"`
				Env               map[string]string `json:"env"`
			} `json:"configurations"`
		}
		if err := jsonc(text, &f); err != nil {
			return nil, fail("invalid_config", ".vscode/launch.json: %v", err)
		}
		for _, l := range f.Configurations {
			rc := runConfig{Name: l.Name, Source: "launch.json", Type: l.Type, Cwd: cwdOf(l.Cwd), Env: substEnv(l.Env)}
			args := substAll(l.Args)
			prog := local(subst(l.Program), rc.Cwd)
			switch l.Type {
			case "go":
				prog = subst(l.Program)
				if prog == "" {
					prog = "."
				}
				verb := "run"
				if l.Mode == "test" {
					verb = "test"
				}
				rc.Argv = append([]string{"go", verb, goPkg(prog)}, args...)
			case "node", "pwa-node":
				rt := l.RuntimeExecutable
				if rt == "" {
					rt = "node"
				}
				rc.Argv = append(append([]string{rt}, substAll(l.RuntimeArgs)...), prog)
				if prog == "" {
					rc.Argv = rc.Argv[:len(rc.Argv)-1]
				}
				rc.Argv = append(rc.Argv, args...)
			case "python", "debugpy":
				if l.Module != "" {
					rc.Argv = append([]string{"python3", "-m", l.Module}, args...)
				} else {
					rc.Argv = append([]string{"python3", prog}, args...)
				}
			case "shell":
				if l.Command != "" {
					rc.Argv, rc.Err = simpleCommand(subst(l.Command), args)
				} else {
					rc.Argv = append([]string{"sh", prog}, args...)
				}
			default:
				rc.Err = "launch type " + l.Type + " is not supported (go, node, python, shell are)"
			}
			add(rc)
		}
	}

	if text, ok, err := c.readOptional(ctx, ".vscode/tasks.json"); err != nil {
		return nil, err
	} else if ok {
		var f struct {
			Tasks []struct {
				Label   string          `json:"label"`
				Type    string          `json:"type"`
				Command string          `json:"command"`
				Script  string          `json:"script"`
				Args    []string        `json:"args"`
				Group   json.RawMessage `json:"group"`
				Options struct {
					Cwd string            `json:"cwd"`
					Env map[string]string `json:"env"`
				} `json:"options"`
			} `json:"tasks"`
		}
		if err := jsonc(text, &f); err != nil {
			return nil, fail("invalid_config", ".vscode/tasks.json: %v", err)
		}
		for _, t := range f.Tasks {
			name := t.Label
			if name == "" && t.Type == "npm" {
				name = "npm: " + t.Script
			}
			rc := runConfig{Name: name, Source: "tasks.json", Type: t.Type, Group: taskGroup(t.Group), Cwd: cwdOf(t.Options.Cwd), Env: substEnv(t.Options.Env)}
			switch t.Type {
			case "process":
				rc.Argv = append([]string{subst(t.Command)}, substAll(t.Args)...)
			case "shell", "":
				rc.Argv, rc.Err = simpleCommand(subst(t.Command), substAll(t.Args))
			case "npm":
				rc.Argv = []string{"npm", "run", t.Script}
			default:
				rc.Err = "task type " + t.Type + " is not supported (process, shell, npm are)"
			}
			add(rc)
		}
	}

	if text, ok, err := c.readOptional(ctx, "Makefile"); err != nil {
		return nil, err
	} else if ok {
		for _, t := range makeTargets(text) {
			add(runConfig{Name: "make " + t, Source: "Makefile", Type: "make", Group: groupOf(t), Argv: []string{"make", t}, Cwd: "."})
		}
	}

	if text, ok, err := c.readOptional(ctx, "package.json"); err != nil {
		return nil, err
	} else if ok {
		var f struct {
			Scripts map[string]string `json:"scripts"`
		}
		if json.Unmarshal([]byte(text), &f) == nil {
			names := make([]string, 0, len(f.Scripts))
			for n := range f.Scripts {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				add(runConfig{Name: "npm run " + n, Source: "package.json", Type: "npm", Group: groupOf(n), Argv: []string{"npm", "run", n}, Cwd: "."})
			}
		}
	}
	return out, nil
}

var envRef = regexp.MustCompile(`\$\{env:[A-Za-z_][A-Za-z0-9_]*\}`)

// local makes a program under the workspace relative to the root when it runs there.
func local(p, cwd string) string {
	if r, ok := strings.CutPrefix(p, "/workspace/"); ok && cwd == "." {
		return r
	}
	return p
}

// goPkg turns a launch program into a go run argument: a directory or file under the
// workspace as ./rel.
func goPkg(p string) string {
	if rel, ok := strings.CutPrefix(p, "/workspace/"); ok {
		return "./" + rel
	}
	if p == "/workspace" {
		return "."
	}
	return p
}

func taskGroup(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Kind string `json:"kind"`
	}
	if json.Unmarshal(raw, &o) == nil {
		return o.Kind
	}
	return ""
}

func groupOf(name string) string {
	switch name {
	case "test", "build":
		return name
	}
	return ""
}

var makeTarget = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9_./-]*)\s*:([^=]|$)`)

// makeTargets are a Makefile's explicit targets, in order (no special, pattern or
// variable targets).
func makeTargets(text string) []string {
	var out []string
	seen := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		m := makeTarget.FindStringSubmatch(line)
		if m == nil || seen[m[1]] {
			continue
		}
		seen[m[1]] = true
		out = append(out, m[1])
	}
	return out
}

// simpleCommand splits shell syntax that is one simple command (words and quotes, no
// operators, redirections, expansions or substitutions) into argv. Anything more is
// refused: a background process runs one program, without a shell.
func simpleCommand(cmd string, extra []string) ([]string, string) {
	words := cmd
	for _, a := range extra {
		words += " " + syntaxQuote(a)
	}
	f, err := syntax.NewParser().Parse(strings.NewReader(words), "")
	if err != nil {
		return nil, "command: " + err.Error()
	}
	const compound = "only one simple command can run as a background configuration (no operators, redirections or expansions): use execute_terminal_command for shell syntax"
	if len(f.Stmts) != 1 {
		return nil, compound
	}
	st := f.Stmts[0]
	ce, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || st.Negated || st.Background || len(st.Redirs) > 0 || len(ce.Assigns) > 0 || len(ce.Args) == 0 {
		return nil, compound
	}
	var argv []string
	for _, w := range ce.Args {
		s, ok := literal(w)
		if !ok {
			return nil, compound
		}
		argv = append(argv, s)
	}
	return argv, ""
}

func literal(w *syntax.Word) (string, bool) {
	var b strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			b.WriteString(strings.ReplaceAll(p.Value, "\\", ""))
		case *syntax.SglQuoted:
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					return "", false
				}
				b.WriteString(l.Value)
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}

func syntaxQuote(s string) string {
	if q, err := syntax.Quote(s, syntax.LangPOSIX); err == nil {
		return q
	}
	return "'" + s + "'"
}
