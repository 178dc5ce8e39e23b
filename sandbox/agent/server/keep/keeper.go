// Package keep keeps the agent's background processes — their output and their state —
// in a process of its own, the keeper, so that they outlive `cws-agent serve`.
//
// serve starts every background process itself (as the workspace user, in its own
// process group, through the launcher when a policy says so), with stdout and stderr
// on pipes, and hands the pipes' read ends and a pidfd of the process to the keeper
// (Adopt). The keeper reads the output into rings, learns the exit status, and answers
// serve's questions (List, Output, Info) on a unix socket in the agent's private state
// directory, which the workspace user can neither enter nor connect to. When serve is
// killed and init starts another, the new serve asks the same keeper: there is nothing
// to re-adopt, since serve never held the state.
//
// The exit status comes from whoever reaps the process: serve (Exited) while it lives,
// and init, PID 1, once serve died and the orphan was reparented to it (RecordExit
// writes the status into a marker file the keeper made for that pid).
//
// A small record per process (<dir>/<id>.json) outlives the keeper. A keeper that
// starts where another one ended reports that one's processes as lost with the agent
// (agent.CodeLost), never as unknown, and never gives their ids again.
//
// One keeper holds every process of a sandbox: a Go process per background process
// would spend a few threads each against the container's pids limit.
package keep

import (
	"cmp"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
)

// Proc is what serve tells the keeper about a process it has just started.
type Proc struct {
	Argv       []string  `json:"argv"`
	PID        int       `json:"pid"` // also its process group
	StartedAt  time.Time `json:"startedAt"`
	Unenforced bool      `json:"unenforced,omitempty"`
	// OutputCap is the bytes kept per stream (the last ones); 0 means MaxOutputCap.
	OutputCap int64 `json:"outputCap,omitempty"`
}

// Files are a started process's handles, handed over with Adopt, which owns them from
// then on: the read ends of its stdout and stderr pipes, and a pidfd (optional: without
// one, as where seccomp refuses pidfd_open, its exit marker is polled for).
type Files struct {
	Stdout, Stderr, PIDFD *os.File
}

func (f Files) close() {
	for _, c := range []*os.File{f.Stdout, f.Stderr, f.PIDFD} {
		if c != nil {
			c.Close()
		}
	}
}

// MaxOutputCap is the most one stream may keep: stdout and stderr travel together in
// one agent frame body.
const MaxOutputCap = agent.MaxBody/2 - 4096

// Timing of the exit status.
const (
	exitPoll = 5 * time.Millisecond // once the pidfd said the process is gone
	// exitWait bounds the wait for its reaper's word; then the exit code is -1.
	exitWait = 5 * time.Second
	// noPIDFDPoll is how often the marker of a process without a pidfd is read.
	noPIDFDPoll = 250 * time.Millisecond
)

// Keeper holds the background processes of one sandbox.
type Keeper struct {
	dir string // "": memory only (no records, no exit markers)
	run string // the run's name, in every id (id.go)
	log *slog.Logger

	mu    sync.Mutex
	next  int // the last id's number
	procs map[string]*proc
}

// proc is one background process and its output.
type proc struct {
	id         string
	argv       []string
	pid        int
	started    time.Time
	unenforced bool
	// lost: known from the record of a keeper that ended; its output went with it.
	lost bool

	mu      sync.Mutex
	stdout  Ring
	stderr  Ring
	open    int  // output pipes not at their end yet
	code    *int // the exit code, once its reaper told
	ended   *time.Time
	ending  bool          // its end is being recorded
	changed chan struct{} // closed and replaced on new output, exit or end
}

// New returns a keeper that keeps its records and exit markers in dir ("" keeps
// everything in memory). The processes of records already in dir are lost: they
// belonged to a keeper that ended.
func New(dir string, log *slog.Logger) (*Keeper, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k := &Keeper{dir: dir, log: log, procs: map[string]*proc{}}
	if dir == "" {
		k.run = newRun()
		return k, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// A full /tmp costs what would be written there (the run's name for the next
	// keeper, exit markers, records), never the processes themselves.
	var err error
	if k.run, err = ensureRun(dir); err != nil {
		k.run = newRun()
		log.Warn("the run's name is not kept: should this keeper end, the ids of its processes will read as lost with a container restart", "err", err)
	}
	// A marker left by an ended keeper names no process of this one.
	_ = os.RemoveAll(filepath.Join(dir, exitsDir))
	if err := os.Mkdir(filepath.Join(dir, exitsDir), 0o700); err != nil {
		log.Warn("no exit markers: processes that outlive serve will have no exit code", "err", err)
	}
	recs, err := loadRecords(dir)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		p := lostProc(r)
		k.procs[p.id] = p
		k.next = max(k.next, idNumber(p.id))
	}
	return k, nil
}

// Adopt takes over a started process: its output, its exit, its record. It returns
// the process with its id. The files are Adopt's from now on, even when it fails.
func (k *Keeper) Adopt(_ context.Context, pr Proc, f Files) (agent.ProcInfo, error) {
	if f.Stdout == nil || f.Stderr == nil || len(pr.Argv) == 0 || pr.PID <= 0 {
		f.close()
		return agent.ProcInfo{}, agent.Errorf(agent.CodeInvalid, "", "adopt: a process needs argv, a pid, stdout and stderr")
	}
	c := pr.OutputCap
	if c <= 0 || c > MaxOutputCap {
		c = MaxOutputCap
	}
	p := &proc{argv: pr.Argv, pid: pr.PID, started: pr.StartedAt, unenforced: pr.Unenforced,
		stdout: NewRing(int(c)), stderr: NewRing(int(c)), open: 2, changed: make(chan struct{})}
	k.mu.Lock()
	k.next++
	p.id = formatID(k.next, k.run)
	k.procs[p.id] = p
	k.mu.Unlock()
	k.save(p.info())
	k.mark(p.pid)
	go k.watch(p, f.PIDFD)
	go k.drain(p, f.Stdout, &p.stdout)
	go k.drain(p, f.Stderr, &p.stderr)
	return p.info(), nil
}

// Exited records the exit code its reaper read (-1: killed by a signal).
func (k *Keeper) Exited(_ context.Context, id string, code int) error {
	p, err := k.lookup(id)
	if err != nil {
		return err
	}
	k.exited(p, code)
	return nil
}

// List returns every process, running, ended or lost, oldest first.
func (k *Keeper) List(context.Context) ([]agent.ProcInfo, error) {
	k.mu.Lock()
	ps := make([]*proc, 0, len(k.procs))
	for _, p := range k.procs {
		ps = append(ps, p)
	}
	k.mu.Unlock()
	out := make([]agent.ProcInfo, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.info())
	}
	slices.SortFunc(out, func(a, b agent.ProcInfo) int {
		return cmp.Or(a.StartedAt.Compare(b.StartedAt), cmp.Compare(idNumber(a.ID), idNumber(b.ID)))
	})
	return out, nil
}

// Running counts the processes that run.
func (k *Keeper) Running(context.Context) (int, error) {
	k.mu.Lock()
	ps := make([]*proc, 0, len(k.procs))
	for _, p := range k.procs {
		ps = append(ps, p)
	}
	k.mu.Unlock()
	n := 0
	for _, p := range ps {
		p.mu.Lock()
		if p.ended == nil && !p.lost {
			n++
		}
		p.mu.Unlock()
	}
	return n, nil
}

// Output returns a process's output since the offsets, after waiting up to a.WaitMS
// for some (or for its end) when there is none yet.
func (k *Keeper) Output(ctx context.Context, a agent.ProcOutputArgs) (*agent.ProcOutput, error) {
	p, err := k.lookup(a.ID)
	if err != nil {
		return nil, err
	}
	if p.lost {
		return nil, p.lostError("its output")
	}
	err = WaitFor(ctx, a.WaitMS, func() (bool, <-chan struct{}) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.stdout.Total() > a.StdoutOffset || p.stderr.Total() > a.StderrOffset || p.ended != nil, p.changed
	})
	if err != nil {
		return nil, err
	}
	out := agent.ProcOutput{Proc: p.info()}
	p.mu.Lock()
	var d1, d2 bool
	out.Stdout, out.StdoutOffset, d1 = p.stdout.Since(a.StdoutOffset)
	out.Stderr, out.StderrOffset, d2 = p.stderr.Since(a.StderrOffset)
	p.mu.Unlock()
	out.Dropped = d1 || d2
	return &out, nil
}

// Info returns a process, after waiting up to wait for it to end if it runs. A lost
// process is an error.
func (k *Keeper) Info(ctx context.Context, id string, wait time.Duration) (agent.ProcInfo, error) {
	p, err := k.lookup(id)
	if err != nil {
		return agent.ProcInfo{}, err
	}
	if p.lost { // its pid may name another process by now: it is not to be signaled
		return agent.ProcInfo{}, p.lostError("its state")
	}
	err = WaitFor(ctx, wait.Milliseconds(), func() (bool, <-chan struct{}) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.ended != nil, p.changed
	})
	return p.info(), err
}

func (k *Keeper) lookup(id string) (*proc, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.procs[id]
	if ok {
		return p, nil
	}
	if _, run, ok := parseID(id); ok && run != k.run {
		return nil, agent.Errorf(agent.CodeLost, "", "background process %s was lost with the agent: the agent was restarted with its container since the process started, and the process went with it, output and all. Start it again if you need it", id)
	}
	return nil, agent.Errorf(agent.CodeNotFound, "", "no background process %q", id)
}

func (p *proc) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *proc) info() agent.ProcInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.infoLocked()
}

func (p *proc) infoLocked() agent.ProcInfo {
	pi := agent.ProcInfo{ID: p.id, Argv: p.argv, PID: p.pid, Running: p.ended == nil && !p.lost, StartedAt: p.started, Unenforced: p.unenforced}
	if p.ended != nil && p.code != nil {
		code, end := *p.code, *p.ended
		pi.ExitCode, pi.EndedAt = &code, &end
	}
	return pi
}
