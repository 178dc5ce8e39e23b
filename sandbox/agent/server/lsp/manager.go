package lsp

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
)

// Config configures a Manager. Zero values mean the defaults given.
type Config struct {
	// Root is the workspace directory the servers run in and index. Required.
	Root string
	// DisplayRoot is the directory results name in file:// URIs for workspace files, as
	// the API sees the workspace; "" means /workspace.
	DisplayRoot string
	// Path is where server programs are looked up, and the PATH they run with;
	// "" means agent.SafePath.
	Path string
	// Env is the base environment (KEY=VALUE) servers start from; PATH is always Path.
	// A language's Env entries are added where Env does not set them.
	Env []string
	// Languages are the languages served; nil means DefaultLanguages().
	Languages []Language
	// IdleTimeout stops a server that served nothing for this long; 0 means 10 minutes,
	// negative means never.
	IdleTimeout time.Duration
	// DiagnosticsWait is how long get_diagnostics waits for a server that pushes
	// diagnostics to publish them for the synced text; 0 means 5 seconds.
	DiagnosticsWait time.Duration
	// StopGrace is how long an idle server gets between shutdown and SIGKILL; 0 means 2s.
	StopGrace time.Duration
	// Buffered is how many log and show messages are kept (each); 0 means 1000.
	Buffered int
	// MaxOpenDocuments bounds the files kept open per server (the least recently used are
	// closed); 0 means 200.
	MaxOpenDocuments int
	// WarmDelay is how long writes and uploads must have been quiet before the servers of
	// the projects they show are started in the background (warm.go); 0 means 500ms,
	// negative turns warm-up off.
	WarmDelay time.Duration
	// WarmMemory is the memory, in bytes, the container must have free (its cgroup's
	// memory.max less what it uses) for a warm-up to start a server; 0 means 384 MiB,
	// negative means not checked.
	WarmMemory int64
	// Cgroup is where the container's cgroup is mounted (v2, or v1's hierarchies beneath
	// it), read for WarmMemory and the pids limit; "" means /sys/fs/cgroup. A limit that
	// cannot be read is no limit.
	Cgroup string
	// Start, when set, starts a server's process in place of exec.Cmd.Start (in a
	// scoped Landlock domain of its own, through the agent's launcher: same-uid mode).
	// Either way it is started from a thread held until the process ends.
	Start func(*exec.Cmd) error
	Log   *slog.Logger
}

// Backoff between restarts of a server that keeps crashing: the first restart is
// immediate, then 250ms doubling to a minute. A server that ran stableAfter resets it.
const (
	backoffBase = 250 * time.Millisecond
	backoffMax  = time.Minute
	stableAfter = 2 * time.Minute
)

// Manager runs the workspace's language servers, one per language, and serves the
// tools on them. It is safe for concurrent use.
type Manager struct {
	cfg      Config
	log      *slog.Logger
	logs     *ring
	messages *ring
	realRoot string // Root with symlinks resolved

	mu     sync.Mutex
	slots  map[string]*slot // by language name
	warm   warmState        // what writes showed since the last warm-up (warm.go)
	closed bool
	quit   chan struct{} // closed by Close
}

// slot is one language's server and its restart state (guarded by Manager.mu, except
// starting, which serialises starts).
type slot struct {
	starting  sync.Mutex
	srv       *server
	crashes   int
	restartAt time.Time
	// warmed: a warm-up started (or tried) this language's server, and no tool call has
	// used a server of it since; writes warm it no more (warm.go).
	warmed bool
}

// New returns a Manager; it starts no server until one is needed.
func New(cfg Config) *Manager {
	if cfg.DisplayRoot == "" {
		cfg.DisplayRoot = "/workspace"
	}
	if cfg.Path == "" {
		cfg.Path = agent.SafePath
	}
	if cfg.Languages == nil {
		cfg.Languages = DefaultLanguages()
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 10 * time.Minute
	}
	if cfg.DiagnosticsWait <= 0 {
		cfg.DiagnosticsWait = 5 * time.Second
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 2 * time.Second
	}
	if cfg.Buffered <= 0 {
		cfg.Buffered = 1000
	}
	if cfg.MaxOpenDocuments <= 0 {
		cfg.MaxOpenDocuments = 200
	}
	if cfg.WarmDelay == 0 {
		cfg.WarmDelay = 500 * time.Millisecond
	}
	if cfg.WarmMemory == 0 {
		cfg.WarmMemory = 384 << 20
	}
	if cfg.Cgroup == "" {
		cfg.Cgroup = "/sys/fs/cgroup"
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	cfg.Root = filepath.Clean(cfg.Root)
	real, err := filepath.EvalSymlinks(cfg.Root)
	if err != nil {
		real = cfg.Root
	}
	return &Manager{
		cfg: cfg, log: cfg.Log.With("component", "lsp"), logs: newRing(cfg.Buffered), messages: newRing(cfg.Buffered),
		realRoot: real, slots: map[string]*slot{}, quit: make(chan struct{}),
	}
}

// get returns lang's running server, starting it if needed. After a crash the start
// waits out the backoff (bounded by ctx).
func (m *Manager) get(ctx context.Context, lang *Language) (*server, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, agent.Errorf(agent.CodeCanceled, "", "the agent is shutting down")
	}
	sl := m.slots[lang.Name]
	if sl == nil {
		sl = &slot{}
		m.slots[lang.Name] = sl
	}
	m.mu.Unlock()

	sl.starting.Lock()
	defer sl.starting.Unlock()
	m.mu.Lock()
	srv, at := sl.srv, sl.restartAt
	m.mu.Unlock()
	if srv != nil && !srv.exitedNow() {
		srv.touch()
		return srv, nil
	}
	if srv != nil {
		srv.gone() // reaped and counted as a crash before its successor starts
		m.mu.Lock()
		at = sl.restartAt
		m.mu.Unlock()
	}
	if _, _, err := m.find(lang); err != nil {
		return nil, err // answered at once: nothing to wait for
	}
	if wait := time.Until(at); wait > 0 {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return nil, agent.Errorf(agent.CodeInternal, "", "the %s language server keeps crashing; next restart in %s (see get_server_logs)", lang.Name, wait.Round(time.Millisecond))
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	srv, err := m.start(ctx, lang)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.crashed(sl, lang.Name, 0)
		m.logs.add(entry{Level: "error", Message: err.Error(), Time: time.Now().UTC(), Server: lang.Name})
		return nil, err
	}
	if m.closed {
		go srv.kill()
		return nil, agent.Errorf(agent.CodeCanceled, "", "the agent is shutting down")
	}
	sl.srv = srv
	m.armIdle(srv)
	return srv, nil
}

// running returns lang's server if it is running, without starting it.
func (m *Manager) running(lang *Language) *server {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sl := m.slots[lang.Name]; sl != nil && sl.srv != nil && !sl.srv.exitedNow() {
		return sl.srv
	}
	return nil
}

// crashed counts a failure and sets when the next start may happen. Called with m.mu.
func (m *Manager) crashed(sl *slot, name string, ran time.Duration) {
	if ran >= stableAfter {
		sl.crashes = 0
	}
	sl.crashes++
	delay := time.Duration(0)
	if sl.crashes > 1 {
		delay = min(backoffMax, backoffBase<<min(sl.crashes-2, 16))
	}
	sl.restartAt = time.Now().Add(delay)
}

// exited is called when a server process has ended, deliberately or not.
func (m *Manager) exited(s *server) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sl := m.slots[s.lang.Name]
	if sl == nil || sl.srv != s {
		return // never installed (failed start) or already replaced
	}
	sl.srv = nil
	if s.stopping.Load() {
		return
	}
	ran := time.Since(s.started)
	m.crashed(sl, s.lang.Name, ran)
	msg := fmt.Sprintf("%s exited unexpectedly after %s (%v); it is restarted on the next request", s.name, ran.Round(time.Millisecond), s.err)
	m.logs.add(entry{Level: "error", Message: msg, Time: time.Now().UTC(), Server: s.name})
	m.log.Warn("language server exited", "server", s.name, "pid", s.cmd.Process.Pid, "err", s.err)
}

// armIdle stops s once it has served nothing for IdleTimeout. Called with m.mu.
func (m *Manager) armIdle(s *server) {
	idle := m.cfg.IdleTimeout
	if idle < 0 {
		return
	}
	var check func()
	check = func() {
		left := idle - time.Since(time.Unix(0, s.lastUsed.Load()))
		if s.inflight.Load() > 0 {
			left = idle
		}
		if left > 0 {
			time.AfterFunc(left, check)
			return
		}
		m.mu.Lock()
		sl := m.slots[s.lang.Name]
		if sl == nil || sl.srv != s {
			m.mu.Unlock()
			return
		}
		sl.srv = nil
		s.stopping.Store(true)
		m.mu.Unlock()
		m.log.Info("language server idle, stopping", "server", s.name, "idle", idle)
		s.stop(m.cfg.StopGrace)
	}
	time.AfterFunc(idle, check)
}

// Close kills every server (the agent is shutting down). Later requests fail.
func (m *Manager) Close() {
	m.mu.Lock()
	if !m.closed {
		close(m.quit)
	}
	m.closed = true
	if m.warm.timer != nil {
		m.warm.timer.Stop()
	}
	var all []*server
	for _, sl := range m.slots {
		if sl.srv != nil {
			all = append(all, sl.srv)
			sl.srv = nil
		}
	}
	m.mu.Unlock()
	for _, s := range all {
		s.kill()
	}
	for _, s := range all {
		<-s.done
	}
}

// Status describes one running server.
type Status struct {
	Language string
	Server   string
	PID      int
	Started  time.Time
	Encoding Encoding
}

// Status lists the running servers, by language.
func (m *Manager) Status() []Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Status
	for name, sl := range m.slots {
		if s := sl.srv; s != nil && !s.exitedNow() {
			out = append(out, Status{Language: name, Server: s.name, PID: s.cmd.Process.Pid, Started: s.started, Encoding: s.enc})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Language < out[j].Language })
	return out
}

// fileURI is the file:// URI of an absolute path.
func fileURI(abs string) string { return (&url.URL{Scheme: "file", Path: abs}).String() }

func (m *Manager) rootURI() string { return fileURI(m.cfg.Root) }

type folder struct {
	URI  string `json:"uri"`
	Name string `json:"name"`
}

func (m *Manager) folders() []folder {
	return []folder{{URI: m.rootURI(), Name: filepath.Base(m.cfg.DisplayRoot)}}
}
