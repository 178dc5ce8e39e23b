package shell

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
)

// NotAllowed is a program the policy refuses. It never started.
type NotAllowed struct {
	Program string // as written
	Reason  string
}

func (e *NotAllowed) Error() string {
	return fmt.Sprintf("command %q not allowed: %s", e.Program, e.Reason)
}

func refuse(program, format string, a ...any) *NotAllowed {
	return &NotAllowed{Program: program, Reason: fmt.Sprintf(format, a...)}
}

// wordKind says what is known of one argument when a command line is checked.
type wordKind int

const (
	known wordKind = iota // its value is known
	later                 // it is only known when the shell runs (a static pre-check skips it)
	input                 // it comes from data a wrapper reads (xargs input, find's file names)
)

type word struct {
	s    string
	kind wordKind
}

func knownWords(argv []string) []word {
	ws := make([]word, len(argv))
	for i, a := range argv {
		ws[i] = word{s: a}
	}
	return ws
}

// checker applies one Policy to command lines.
type checker struct {
	pol Policy
	// static is the pre-check of a parsed script before it runs: a word not yet known
	// in the program's place is skipped (the exec handler checks it once known).
	static bool
}

// program checks one program name, exactly as the host's CheckCommand does: a bare
// name (resolved on the agent's SafePath), listed in Allowed unless Allowed is nil.
func (c checker) program(name string) error {
	switch {
	case name == "":
		return refuse(name, "the command name is empty")
	case strings.Contains(name, "/"):
		return refuse(name, "a command must be a bare program name, resolved on the fixed PATH; run a workspace script through an allowed interpreter (sh script.sh)")
	case name == "." || name == ".." || strings.ContainsFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return refuse(name, "not a program name")
	}
	if c.pol.Allowed != nil && !slices.Contains(c.pol.Allowed, name) {
		return refuse(name, "not in allowedCommands")
	}
	return nil
}

// argv checks the program argv[0] would run, and the programs it runs in turn when it
// is a wrapper (env, xargs, find -exec, nice, timeout, nohup, stdbuf, setsid, time) or
// a shell. open means more arguments come from input after argv (under xargs);
// underInput means argv is run by xargs or find, outside the interpreter.
func (c checker) argv(ws []word, open, underInput bool) error {
	if len(ws) == 0 {
		if open {
			return refuse("", "the program would come from xargs' input")
		}
		return nil
	}
	name := ws[0]
	switch name.kind {
	case later:
		if c.static {
			return nil
		}
	case input:
		return refuse(name.s, "the program would come from input (xargs or find's file names), which cannot be checked")
	}
	if err := c.program(name.s); err != nil {
		return err
	}
	rest := ws[1:]
	switch name.s {
	case "sh", "bash", "dash":
		if underInput {
			return refuse(name.s, "a shell run by xargs or find would run outside the interpreter; use a for loop or a while-read loop instead")
		}
		return c.shell(name.s, rest)
	case "xargs", "find", "env":
		if open {
			return refuse(name.s, "its options and program would come from xargs' input")
		}
	}
	switch name.s {
	case "xargs":
		return c.xargs(rest)
	case "find":
		return c.find(rest)
	}
	w, ok := wrappers[name.s]
	if !ok {
		return nil
	}
	target, env, err := w.split(name.s, rest)
	if err != nil {
		if c.static && err == errLater {
			return nil
		}
		return err
	}
	if len(target) == 0 && open {
		return refuse(name.s, "the program it runs would come from xargs' input")
	}
	if len(target) > 0 {
		if err := c.argv(target, open, underInput); err != nil {
			return err
		}
	} // else e.g. plain "env" or "nice": prints and runs nothing
	for _, kv := range env {
		if err := c.envAssign(name.s, kv); err != nil {
			return err
		}
	}
	return nil
}

// envAssign checks a NAME=VALUE that env would pass to its program: only names the
// allowlist passes, and never the loader or shell hooks.
func (c checker) envAssign(wrapper string, kv word) error {
	if kv.kind != known {
		if c.static && kv.kind == later {
			return nil
		}
		return refuse(wrapper, "an environment assignment from input cannot be checked")
	}
	name, _, _ := strings.Cut(kv.s, "=")
	if !c.pol.envAllowed(name) {
		return refuse(wrapper, "it would set the environment variable %s, which envAllowlist does not pass", name)
	}
	return nil
}

// shell checks sh/bash arguments. At run time the script is interpreted in-process by
// the same handlers, so only the static pre-check looks into a literal -c script.
func (c checker) shell(name string, rest []word) error {
	if !c.static {
		return nil
	}
	inv, err := parseShellArgs(wordStrings(rest, true))
	if err != nil || !inv.hasScript || rest[inv.scriptIndex].kind != known {
		return nil
	}
	f, err := parse(name, inv.script, "")
	if err != nil {
		return nil // reported when it runs
	}
	return c.script(f, nil)
}

// script pre-checks every simple command of a parsed script whose program name is
// already known; funcs are the functions the running shell has defined.
func (c checker) script(f *syntax.File, funcs map[string]*syntax.Stmt) error {
	declared := map[string]bool{}
	for name := range funcs {
		declared[name] = true
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		if fd, ok := n.(*syntax.FuncDecl); ok {
			declared[fd.Name.Value] = true
		}
		return true
	})
	var err error
	syntax.Walk(f, func(n syntax.Node) bool {
		if err != nil {
			return false
		}
		if _, ok := n.(*syntax.FuncDecl); ok {
			return false // a definition runs nothing; a call is checked when it runs
		}
		ce, ok := n.(*syntax.CallExpr)
		if !ok || len(ce.Args) == 0 {
			return true
		}
		ws := make([]word, len(ce.Args))
		for i, a := range ce.Args {
			ws[i] = literal(a)
		}
		err = c.command(ws, declared)
		return true
	})
	return err
}

// command pre-checks one simple command: builtins and functions are the shell's own;
// "command", "exec" and "builtin" run what follows them.
func (c checker) command(ws []word, funcs map[string]bool) error {
	for len(ws) > 0 && ws[0].kind == known {
		switch name := ws[0].s; {
		case name == "builtin":
			return nil // runs builtins only
		case name == "command" || name == "exec":
			ws = ws[1:]
			for len(ws) > 0 && ws[0].kind == known && strings.HasPrefix(ws[0].s, "-") {
				if ws[0].s == "-v" || ws[0].s == "-V" {
					return nil // only prints
				}
				ws = ws[1:]
			}
			continue
		case funcs[name] || interp.IsBuiltin(name):
			return nil
		}
		break
	}
	return c.argv(ws, false, false)
}

// literal returns a word's value when it has no expansion in it.
func literal(w *syntax.Word) word {
	var sb strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			if strings.ContainsAny(p.Value, "*?[\\~") {
				return word{kind: later}
			}
			sb.WriteString(p.Value)
		case *syntax.SglQuoted:
			if p.Dollar {
				return word{kind: later}
			}
			sb.WriteString(p.Value)
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok || strings.ContainsAny(l.Value, "\\$`") {
					return word{kind: later}
				}
				sb.WriteString(l.Value)
			}
		default:
			return word{kind: later}
		}
	}
	return word{s: sb.String()}
}

func wordStrings(ws []word, placeholders bool) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.s
		if w.kind != known && placeholders {
			out[i] = "\x00"
		}
	}
	return out
}

// xargs checks the program xargs would run. With -I (or -i) the replacement string
// marks words that come from input; otherwise input is appended to the command.
func (c checker) xargs(rest []word) error {
	var repl string
	i := 0
	for ; i < len(rest); i++ {
		w := rest[i]
		if w.kind != known {
			if c.static && w.kind == later {
				return nil
			}
			return refuse("xargs", "an option from input cannot be checked")
		}
		a := w.s
		if a == "--" {
			i++
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		if strings.HasPrefix(a, "--") {
			name, val, hasVal := strings.Cut(a[2:], "=")
			switch {
			case xargsLongFlags[name]:
			case name == "replace":
				repl = "{}"
				if hasVal {
					repl = val
				}
			case xargsLongArgs[name]:
				if !hasVal {
					i++
				}
			default:
				return refuse("xargs", "unknown option %s: cannot tell which program it would run", a)
			}
			continue
		}
	short:
		for j := 1; j < len(a); j++ {
			switch ch := a[j]; {
			case strings.IndexByte("0rtpxo", ch) >= 0:
			case ch == 'I':
				if j+1 < len(a) {
					repl = a[j+1:]
				} else if i+1 < len(rest) {
					i++
					repl = rest[i].s
				}
				break short
			case ch == 'i':
				repl = "{}"
				if j+1 < len(a) {
					repl = a[j+1:]
				}
				break short
			case ch == 'l' || ch == 'e':
				break short // optional attached argument
			case strings.IndexByte("adELnPs", ch) >= 0:
				if j+1 == len(a) {
					i++
				}
				break short
			default:
				return refuse("xargs", "unknown option -%c: cannot tell which program it would run", ch)
			}
		}
	}
	target := rest[min(i, len(rest)):]
	if len(target) == 0 {
		return c.program("echo") // xargs' default program
	}
	ws := slices.Clone(target)
	for k := range ws {
		if repl != "" && strings.Contains(ws[k].s, repl) {
			ws[k].kind = input
		}
	}
	return c.argv(ws, repl == "", true)
}

var (
	xargsLongFlags = map[string]bool{"null": true, "no-run-if-empty": true, "verbose": true, "interactive": true, "exit": true, "open-tty": true}
	xargsLongArgs  = map[string]bool{"arg-file": true, "delimiter": true, "eof": true, "max-lines": true, "max-args": true, "max-procs": true, "max-chars": true, "process-slot-var": true}
)

// find checks the program of every -exec, -execdir, -ok and -okdir: "{}" is a file
// name, which comes from input.
func (c checker) find(rest []word) error {
	for i := 0; i < len(rest); i++ {
		switch rest[i].s {
		case "-exec", "-execdir", "-ok", "-okdir":
		default:
			continue
		}
		j := i + 1
		for j < len(rest) && !(rest[j].kind == known && (rest[j].s == ";" || rest[j].s == "+")) {
			j++
		}
		ws := slices.Clone(rest[i+1 : j])
		for k := range ws {
			if strings.Contains(ws[k].s, "{}") {
				ws[k].kind = input
			}
		}
		if len(ws) == 0 {
			return refuse("find", "%s without a program", rest[i].s)
		}
		if err := c.argv(ws, false, true); err != nil {
			return err
		}
		i = j
	}
	return nil
}
