package shell

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
)

// pipeDrain is how long a program's output is still collected after it exits while a
// child it left behind holds the pipe; then its group is killed.
const pipeDrain = 250 * time.Millisecond

// maxScript bounds a script read from a file or stdin by sh or bash.
const maxScript = 4 << 20

// exec runs every program the interpreter would execute: checked, then either
// interpreted in-process (sh, bash, dash, also beneath env, timeout, nice, …) or started
// by the Host in its own process group.
func (sh *Shell) exec(ctx context.Context, argv []string) error {
	rc := runOf(ctx)
	hc := interp.HandlerCtx(ctx)
	if err := rc.refusal(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := (checker{pol: rc.pol}).argv(knownWords(argv), false, false); err != nil {
		fmt.Fprintf(hc.Stderr, "cws-sh: %v\n", err)
		return rc.refuse(err)
	}
	if p, ok := peel(argv); ok {
		return sh.nested(ctx, hc, p)
	}
	cmd, err := rc.host.Command(argv, hc.Dir, childEnv(hc.Env, rc.pol))
	if errors.Is(err, ErrNotFound) {
		fmt.Fprintf(hc.Stderr, "cws-sh: %s: command not found\n", argv[0])
		return interp.ExitStatus(127)
	}
	if err != nil {
		fmt.Fprintf(hc.Stderr, "cws-sh: %s: %v\n", argv[0], err)
		return rc.refuse(err)
	}
	if hc.Stdin != nil {
		cmd.Stdin = hc.Stdin
	}
	cmd.Stdout, cmd.Stderr = hc.Stdout, hc.Stderr
	cmd.WaitDelay = pipeDrain
	if err := rc.host.Start(cmd); err != nil {
		fmt.Fprintf(hc.Stderr, "cws-sh: %s: %v\n", argv[0], err)
		return interp.ExitStatus(126)
	}
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-ctx.Done():
		stopGroup(pgid, rc.grace, done)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // whatever it left behind in its group
	if err := ctx.Err(); err != nil {
		return err
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return interp.ExitStatus(128 + int(ws.Signal()))
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		return interp.ExitStatus(code)
	}
	return nil
}

// stopGroup asks the process group to stop (SIGTERM) and forces it (SIGKILL) when the
// grace runs out.
func stopGroup(pgid int, grace time.Duration, done <-chan error) {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	}
}

// childEnv is what a program gets from the shell beyond the fixed base environment:
// the exported variables the policy passes.
func childEnv(env expand.Environ, pol Policy) map[string]string {
	m := map[string]string{}
	for name, vr := range env.Each {
		if vr.IsSet() && vr.Exported && vr.Kind == expand.String && pol.envAllowed(name) {
			m[name] = vr.Str
		} else {
			delete(m, name)
		}
	}
	return m
}

// exported is the environment a child shell of the interpreter starts with.
func exported(env expand.Environ) map[string]string {
	m := map[string]string{}
	for name, vr := range env.Each {
		if vr.IsSet() && vr.Exported && vr.Kind == expand.String {
			m[name] = vr.Str
		} else {
			delete(m, name)
		}
	}
	return m
}

// nested interprets sh/bash/dash in-process, in a fresh interpreter with the same
// handlers and the same run: its programs and files are checked like the caller's.
func (sh *Shell) nested(ctx context.Context, hc interp.HandlerContext, p peeled) error {
	rc := runOf(ctx)
	name := p.argv[0]
	inv, err := parseShellArgs(p.argv[1:])
	if err != nil {
		fmt.Fprintf(hc.Stderr, "%s: %v\n", name, err)
		return interp.ExitStatus(2)
	}
	stdin := hc.Stdin
	src, arg0 := inv.script, name
	if inv.arg0 != "" {
		arg0 = inv.arg0
	}
	switch {
	case inv.hasScript:
	case inv.file != "":
		f, err := sh.open(ctx, inv.file, os.O_RDONLY, 0)
		if err != nil {
			if rc.refusal() != nil {
				return err
			}
			fmt.Fprintf(hc.Stderr, "%s: %v\n", name, err)
			return interp.ExitStatus(127)
		}
		b, err := io.ReadAll(io.LimitReader(f, maxScript))
		f.Close()
		if err != nil {
			fmt.Fprintf(hc.Stderr, "%s: %v\n", name, err)
			return interp.ExitStatus(126)
		}
		src, arg0 = string(b), inv.file
	default: // the script is stdin
		if stdin != nil {
			b, _ := io.ReadAll(io.LimitReader(stdin, maxScript))
			src = string(b)
		}
		stdin = nil
	}
	file, err := parse(name, src, arg0)
	if err != nil {
		fmt.Fprintf(hc.Stderr, "%s: %v\n", name, err)
		return interp.ExitStatus(2)
	}
	if err := (checker{pol: rc.pol, static: true}).script(file, nil); err != nil {
		fmt.Fprintf(hc.Stderr, "cws-sh: %v\n", err)
		return rc.refuse(err)
	}
	env := exported(hc.Env)
	if p.clear {
		env = map[string]string{}
	}
	for _, k := range p.unset {
		delete(env, k)
	}
	for k, v := range p.env {
		env[k] = v
	}
	dir := hc.Dir
	if p.dir != "" {
		dir = absPath(dir, p.dir)
		if err := rc.host.Chdir(dir); err != nil {
			fmt.Fprintf(hc.Stderr, "cws-sh: %v\n", err)
			return rc.refuse(err)
		}
	}
	params := append(append(inv.opts, "--"), inv.args...)
	r, err := sh.runner(dir, env, stdin, hc.Stdout, hc.Stderr, interp.Params(params...))
	if err != nil {
		fmt.Fprintf(hc.Stderr, "%s: %v\n", name, err)
		return interp.ExitStatus(126)
	}
	nctx := ctx
	if p.timeout > 0 {
		var cancel context.CancelFunc
		nctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}
	err = r.Run(nctx, file)
	if ctx.Err() == nil && errors.Is(nctx.Err(), context.DeadlineExceeded) {
		return interp.ExitStatus(124) // as timeout(1) reports it
	}
	return err
}

// shellArgs is a parsed sh/bash command line.
type shellArgs struct {
	opts        []string // set options for interp.Params: "-e", "-o", "pipefail", …
	hasScript   bool     // -c
	script      string
	scriptIndex int // of the script among the arguments
	file        string
	arg0        string   // $0 after -c
	args        []string // the positional parameters
}

func parseShellArgs(args []string) (shellArgs, error) {
	var inv shellArgs
	cmd := false
	i := 0
args:
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--" || a == "-":
			i++
			break args
		case strings.HasPrefix(a, "--"):
			switch a {
			case "--rcfile", "--init-file":
				i++
			}
			continue // --norc, --noprofile, --login, --posix, …: nothing to do in-process
		case strings.HasPrefix(a, "-") || strings.HasPrefix(a, "+"):
			sign := a[:1]
			for _, ch := range a[1:] {
				switch {
				case ch == 'c':
					cmd = true
				case ch == 'o':
					if i+1 >= len(args) {
						return inv, fmt.Errorf("%so: option requires an argument", sign)
					}
					i++
					inv.opts = append(inv.opts, sign+"o", args[i])
				case strings.ContainsRune("aefnux", ch):
					inv.opts = append(inv.opts, sign+string(ch))
				case strings.ContainsRune("silrvhBCHPTkmbpEO", ch):
					// interactive, login, stdin, … : nothing to do here
				default:
					return inv, fmt.Errorf("%s%c: invalid option", sign, ch)
				}
			}
			continue
		}
		break
	}
	rest := args[min(i, len(args)):]
	switch {
	case cmd:
		if len(rest) == 0 {
			return inv, errors.New("-c: option requires an argument")
		}
		inv.hasScript, inv.script, inv.scriptIndex = true, rest[0], i
		if len(rest) > 1 {
			inv.arg0, inv.args = rest[1], rest[2:]
		}
	case len(rest) > 0:
		inv.file, inv.args = rest[0], rest[1:]
	}
	return inv, nil
}

// open opens the files the shell itself opens: redirections, source, $(<file).
// /dev/stdin, /dev/stdout and /dev/stderr are the shell's own streams.
func (sh *Shell) open(ctx context.Context, path string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
	rc := runOf(ctx)
	hc := interp.HandlerCtx(ctx)
	switch path {
	case "/dev/stdin", "/dev/fd/0":
		if hc.Stdin == nil {
			return stream{r: bytes.NewReader(nil)}, nil
		}
		return stream{r: hc.Stdin}, nil
	case "/dev/stdout", "/dev/fd/1":
		return stream{w: hc.Stdout}, nil
	case "/dev/stderr", "/dev/fd/2":
		return stream{w: hc.Stderr}, nil
	}
	f, err := rc.host.Open(absPath(hc.Dir, path), flag, perm)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, &os.PathError{Op: "open", Path: path, Err: pe.Err}
		}
		fmt.Fprintf(hc.Stderr, "cws-sh: %s: %v\n", path, err)
		return nil, rc.refuse(err)
	}
	return f, nil
}

// stream is one of the shell's own streams opened by name; closing it closes nothing.
type stream struct {
	r io.Reader
	w io.Writer
}

func (s stream) Read(p []byte) (int, error) {
	if s.r == nil {
		return 0, io.EOF
	}
	return s.r.Read(p)
}

func (s stream) Write(p []byte) (int, error) {
	if s.w == nil {
		return 0, os.ErrInvalid
	}
	return s.w.Write(p)
}

func (stream) Close() error { return nil }

// call checks where cd and pushd would go before the builtin runs; cd without an
// operand goes to the shell's home (the workspace), not $HOME.
func (sh *Shell) call(ctx context.Context, args []string) ([]string, error) {
	i := 0
	for i < len(args)-1 && (args[i] == "builtin" || args[i] == "command") {
		i++
	}
	if args[i] != "cd" && args[i] != "pushd" {
		return args, nil
	}
	rc := runOf(ctx)
	hc := interp.HandlerCtx(ctx)
	var ops []string
	for _, a := range args[i+1:] {
		if a == "-L" || a == "-P" || a == "-n" {
			continue
		}
		ops = append(ops, a)
	}
	var target string
	switch {
	case len(ops) == 0 && args[i] == "cd":
		target = sh.cfg.Home
		if target == "" {
			target = sh.cfg.Dir
		}
		args = append(args[:i+1:i+1], target)
	case len(ops) == 0:
		return args, nil // pushd swaps two directories it already checked
	case ops[0] == "-":
		target = hc.Env.Get("OLDPWD").String()
	case args[i] == "pushd" && len(ops[0]) > 1 && (ops[0][0] == '+' || ops[0][0] == '-') && isNumber(ops[0][1:]):
		return args, nil // rotates the stack of checked directories
	default:
		target = ops[0]
	}
	if target == "" {
		return args, nil
	}
	if err := rc.host.Chdir(absPath(hc.Dir, target)); err != nil {
		fmt.Fprintf(hc.Stderr, "cws-sh: %s: %v\n", args[i], err)
		return nil, rc.refuse(err)
	}
	return args, nil
}

func absPath(dir, path string) string {
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	return filepath.Clean(path)
}
