// Package shell is the agent's terminal interpreter: a POSIX/Bash shell
// (mvdan.cc/sh/v3) that runs in the agent process and starts no program the policy
// does not allow.
//
// Builtins (cd, echo, export, test, printf, read, …) are the interpreter's own. Every
// program it would execute — in pipelines, $(…), backticks, subshells, functions, traps,
// eval — reaches one exec handler, which checks it against Policy.Allowed before it
// starts, together with the program a wrapper would run (env, xargs, find -exec, nice,
// timeout, nohup, stdbuf, setsid, time). sh, bash and dash are never started: their
// scripts (-c, a file, or stdin) are interpreted in-process by the same handlers.
// Every file the shell itself opens (redirections, source, $(<file)) and every cd goes
// through the Host, which applies the path policy.
//
// A Shell keeps its state (working directory, variables, functions, options) from one
// Run to the next, like a terminal.
//
// Decisions worth knowing:
//   - A script whose literal program names include a refused one is refused before any
//     of it runs; names known only at run time ($p, eval, a function defined in an
//     earlier run) are refused when reached, and nothing after them starts.
//   - Programs get the fixed base environment plus the exported variables that
//     Policy.EnvAllowlist or Policy.Pass names; PATH is always the fixed one and
//     LD_*, BASH_ENV, ENV and the like never pass. "env NAME=…" for any other name is
//     refused rather than quietly dropped.
//   - Under xargs and find -exec, a program that comes from input, a wrapper whose
//     options or program would, and any shell (it would run outside the interpreter)
//     are refused. Unknown wrapper options are refused.
//   - Jobs started with & belong to the run: they are killed when it ends. Long-lived
//     processes belong to the agent's background processes instead.
//   - Globs list directory names anywhere (names only, like ls); kill, ulimit and a
//     few other builtins are not supported by the interpreter.
package shell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
)

// Name is what the shell calls itself.
const Name = "cws-sh (mvdan.cc/sh POSIX)"

// ErrNotFound is wrapped by a Host's Command error when the program is not on the
// fixed PATH: the shell reports it as exit status 127, like any shell.
var ErrNotFound = errors.New("command not found")

// Host is what the shell needs from the agent. Paths are absolute and clean.
type Host interface {
	// Command prepares argv to run in dir with env added to the fixed base environment,
	// in its own process group. It must not start it.
	Command(argv []string, dir string, env map[string]string) (*exec.Cmd, error)
	// Start starts a command Command prepared (under the restrictions the host puts on
	// what it may execute); an error is a start failure, exit status 126.
	Start(cmd *exec.Cmd) error
	// Open opens a file for the shell itself (a redirection, source, $(<file)). An
	// error that is not an *os.PathError is a refusal: it stops the whole run.
	Open(path string, flag int, perm os.FileMode) (io.ReadWriteCloser, error)
	// Chdir checks that cd may enter dir; an error is a refusal that stops the run.
	Chdir(dir string) error
}

// Policy is what one run may do. The host sends it with every call.
type Policy struct {
	// Allowed lists the program names that may run; nil allows any bare name on the
	// fixed PATH, an empty list none. Names with a "/" are always refused.
	Allowed []string
	// EnvAllowlist names the exported variables that reach programs, beyond the fixed
	// base environment (nil: none). Loader and shell hooks never pass (see Forbidden).
	EnvAllowlist []string
	// Pass names more variables that reach programs: those the host set for the shell.
	Pass []string
}

func (p Policy) envAllowed(name string) bool {
	if Forbidden(name) {
		return false
	}
	for _, l := range [][]string{p.EnvAllowlist, p.Pass} {
		for _, n := range l {
			if n == name {
				return true
			}
		}
	}
	return false
}

// Forbidden reports the variables no program ever gets from the shell: the dynamic
// loader's (LD_*), the shells' start-up hooks, and PATH (always the fixed one).
func Forbidden(name string) bool {
	switch name {
	case "PATH", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "GCONV_PATH", "IFS", "CDPATH":
		return true
	}
	return strings.HasPrefix(name, "LD_") || strings.HasPrefix(name, "BASH_FUNC_")
}

// Config configures a Shell.
type Config struct {
	Dir    string            // the starting directory, absolute
	Home   string            // where cd without an operand goes; "" means Dir
	Env    map[string]string // the shell's starting variables, all exported
	Stdout io.Writer         // nil discards
	Stderr io.Writer         // nil discards
	// Grace is how long a program has between SIGTERM and SIGKILL when the run is
	// cancelled or times out; 0 means 2s.
	Grace time.Duration
}

// Shell is one terminal: a persistent interpreter. Runs are serialised.
type Shell struct {
	cfg Config
	sem chan struct{}
	r   *interp.Runner

	mu  sync.Mutex
	dir string // the working directory after the last run
}

// New returns a Shell in cfg.Dir.
func New(cfg Config) (*Shell, error) {
	if cfg.Grace <= 0 {
		cfg.Grace = 2 * time.Second
	}
	sh := &Shell{cfg: cfg, sem: make(chan struct{}, 1)}
	r, err := sh.runner(cfg.Dir, cfg.Env, nil, cfg.Stdout, cfg.Stderr)
	if err != nil {
		return nil, err
	}
	sh.r, sh.dir = r, r.Dir
	return sh, nil
}

// runner builds an interpreter with the checking handlers.
func (sh *Shell) runner(dir string, env map[string]string, stdin io.Reader, stdout, stderr io.Writer, opts ...interp.RunnerOption) (*interp.Runner, error) {
	pairs := make([]string, 0, len(env)+1)
	for k, v := range env {
		if k != "PATH" {
			pairs = append(pairs, k+"="+v)
		}
	}
	pairs = append(pairs, "PATH="+safePath)
	base := []interp.RunnerOption{
		interp.Env(expand.ListEnviron(pairs...)),
		interp.Dir(dir),
		interp.StdIO(stdin, stdout, stderr),
		interp.ExecHandlers(func(interp.ExecHandlerFunc) interp.ExecHandlerFunc { return sh.exec }),
		interp.OpenHandler(sh.open),
		interp.CallHandler(sh.call),
	}
	return interp.New(append(base, opts...)...)
}

// safePath is the PATH the interpreter shows; programs are looked up by the Host.
const safePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Result is the outcome of one Run.
type Result struct {
	ExitCode int
	Exited   bool // the script ran exit (or exec): the shell's state starts afresh
	TimedOut bool
	Canceled bool
}

// Run interprets script with pol and host. A program or path the policy refuses stops
// the run and is returned as the error (a *NotAllowed, or the host's refusal); nothing
// after it starts. A syntax error is exit status 2 with the message on stderr.
func (sh *Shell) Run(ctx context.Context, script string, pol Policy, host Host, timeout time.Duration) (Result, error) {
	select {
	case sh.sem <- struct{}{}:
	case <-ctx.Done():
		return Result{ExitCode: -1, Canceled: true}, nil
	}
	defer func() { <-sh.sem }()

	f, err := parse("bash", script, "")
	if err != nil {
		fmt.Fprintf(stderrOf(sh.cfg.Stderr), "cws-sh: %v\n", err)
		return Result{ExitCode: 2}, nil
	}
	rc := &run{pol: pol, host: host, grace: sh.cfg.Grace}
	ctx, rc.cancel = context.WithCancel(ctx)
	defer rc.cancel()
	var tctx context.Context = ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		tctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	tctx = context.WithValue(tctx, runKey{}, rc)

	// Refuse what can be refused before anything starts.
	if err := (checker{pol: pol, static: true}).script(f, sh.r.Funcs); err != nil {
		fmt.Fprintf(stderrOf(sh.cfg.Stderr), "cws-sh: %v\n", err)
		return Result{ExitCode: 126}, err
	}

	defer func() {
		sh.mu.Lock()
		sh.dir = sh.r.Dir
		sh.mu.Unlock()
	}()
	var res Result
	for _, st := range f.Stmts {
		err = sh.r.Run(tctx, st)
		if rc.refusal() != nil || (err != nil && !isExit(err)) || sh.r.Exited() {
			break
		}
	}
	if refused := rc.refusal(); refused != nil {
		return Result{ExitCode: 126}, refused
	}
	switch {
	case errors.Is(tctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		return Result{ExitCode: -1, TimedOut: true}, nil
	case ctx.Err() != nil:
		return Result{ExitCode: -1, Canceled: true}, nil
	case err != nil && !isExit(err):
		return Result{ExitCode: 1}, err
	}
	res.ExitCode = exitCode(err)
	if sh.r.Exited() {
		res.Exited = true
		sh.r.Reset() // a new shell, as a terminal opens one after exit
	}
	return res, nil
}

// Dir is the shell's working directory as the last run left it.
func (sh *Shell) Dir() string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.dir
}

// run is the state of one Run, shared by the handlers through the context: nested
// shells, subshells and background jobs of the run all see it.
type run struct {
	pol    Policy
	host   Host
	grace  time.Duration
	cancel context.CancelFunc

	mu      sync.Mutex
	refused error
}

type runKey struct{}

func runOf(ctx context.Context) *run { return ctx.Value(runKey{}).(*run) }

// refuse records the first refusal and stops everything else in the run.
func (rc *run) refuse(err error) error {
	rc.mu.Lock()
	if rc.refused == nil {
		rc.refused = err
	}
	rc.mu.Unlock()
	rc.cancel()
	return err
}

func (rc *run) refusal() error {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.refused
}

func isExit(err error) bool {
	var es interp.ExitStatus
	return errors.As(err, &es)
}

func exitCode(err error) int {
	var es interp.ExitStatus
	if errors.As(err, &es) {
		return int(es)
	}
	if err != nil {
		return 1
	}
	return 0
}

// parse parses a script for the shell name (bash, or POSIX for sh and dash); arg0 is
// the script's $0.
func parse(name, src, arg0 string) (*syntax.File, error) {
	lang := syntax.LangBash
	if name != "bash" {
		lang = syntax.LangPOSIX
	}
	return syntax.NewParser(syntax.Variant(lang)).Parse(strings.NewReader(src), arg0)
}

func stderrOf(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
