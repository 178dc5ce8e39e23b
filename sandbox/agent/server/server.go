// Package server is the cws-agent's side of the wire protocol: it accepts bridged
// connections, runs the handshake and a yamux session on each, and serves the
// operations of package agent against the workspace directory. It dispatches each call
// to the package that serves it (fs, search, archive, exec, proc, lsp) and serves the
// terminal itself.
//
// Every path is resolved beneath the workspace (package fs), so no spelling and no
// symlink can reach outside it; the optional guard of each request is checked again on
// the symlink-resolved path.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/archive"
	"github.com/cwsdev/cws/sandbox/agent/server/exec"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
	"github.com/cwsdev/cws/sandbox/agent/server/launch"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
	"github.com/cwsdev/cws/sandbox/agent/server/proc"
	"github.com/cwsdev/cws/sandbox/agent/server/search"
	"github.com/cwsdev/cws/sandbox/agent/server/tty"
	"github.com/hashicorp/yamux"
)

// Config configures a Server.
type Config struct {
	Root    string // the workspace directory; "" means /workspace
	Version string // the agent's release, reported in the handshake
	Log     *slog.Logger
	// BaseEnv is the environment every command starts from (PATH is always the fixed SafePath).
	BaseEnv map[string]string
	// StateDir keeps the outcomes of recent requests (see agent.Header.ID) so that they
	// survive an agent restart; "" keeps them in memory only.
	StateDir string
	// ProcDir is where a keeper process (package keep, started from Launcher) holds the
	// background processes, so that they and their output survive this process being
	// killed and restarted; a private directory of the agent's. "" (or no Launcher)
	// keeps them in this process's memory, and they die with it.
	ProcDir string
	// Launcher is the agent binary, which the keeper is started from (ProcDir). It also
	// turns on Landlock: each command whose ExecPolicy restricts what it may execute is
	// restricted as it starts (package launch). "" means neither: such commands run
	// unenforced, as where Landlock is unavailable (tests that serve in-process, where
	// the test binary is no agent).
	Launcher string
	// LSPIdle stops a language server unused this long; 0 means 10 minutes, negative never.
	LSPIdle time.Duration
	// ReleaseIdle gives freed memory back to the OS once no call has run for this long
	// (idle.go); 0 means 2 seconds, negative never.
	ReleaseIdle time.Duration
	// SameUID says the agent runs as the tool user itself (no uid of its own, no
	// capability: a Kubernetes pod). Then every process it starts for the tools (with
	// a Launcher, and where Landlock scopes domains: launch.ScopeABI) starts inside a
	// scoped Landlock domain of its own, which keeps it from signalling, tracing or
	// reading the agent and from its abstract sockets: through the Launcher, which
	// restricts itself and execs the command (exec.Runner.Scope). Without such a kernel
	// the tools can reach the agent: Scoped says so.
	SameUID bool
	// Fenced are the agent's own directories (its binary's, its socket directory, its
	// state), which in same-uid mode no tool process may write beneath: their domains
	// handle every write right and grant it everywhere else (launch.Fence).
	Fenced []string
}

// Server serves agent operations. The background processes are the Server's keeper's
// (package proc), so they outlive any one connection, and with a keeper process the
// Server too.
type Server struct {
	cfg     Config
	log     *slog.Logger
	ws      *fs.Workspace
	files   *fs.Handlers
	search  *search.Handler
	archive *archive.Handlers
	exec    *exec.Runner   // commands, and the exec operation
	proc    *proc.Handlers // the background processes, kept by a keeper (package proc)
	tty     *tty.Manager   // the interactive terminals (package tty)
	ops     map[string]op.Handler
	seen    *outcomes // answers to recent requests with ids (dedupe.go)
	// landlock is the Landlock ABI commands are restricted with; 0: commands with an
	// ExecPolicy run unenforced (or are refused when it requires Landlock).
	landlock int
	// scoped: every tool process starts in a scoped Landlock domain (Config.SameUID).
	scoped   bool
	scopeErr error   // why SameUID could not scope them
	fenced   bool    // the scoped domains also fence the agent's directories off (Config.Fenced)
	lsp      lspHost // the language servers (lsp.go)
	idle     *idleRelease

	mu    sync.Mutex
	conns map[*yamux.Session]struct{}

	egressHosts egressHosts  // the hosts that take egress streams (netedge.go)
	egressPort  atomic.Int64 // the egress proxy's port, which no dial may reach
}

// New opens the workspace root and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Root == "" {
		cfg.Root = "/workspace"
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	ws, err := fs.OpenWorkspace(cfg.Root)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Log, ws: ws, conns: map[*yamux.Session]struct{}{}, seen: newOutcomes(cfg.StateDir)}
	s.idle = newIdleRelease(cfg.ReleaseIdle)
	if cfg.Launcher != "" {
		s.landlock = launch.ABI()
	}
	s.exec = &exec.Runner{WS: ws, BaseEnv: cfg.BaseEnv, Landlock: s.landlock}
	if s.landlock > 0 {
		var scoped uint64
		var fence *launch.Fence
		if cfg.SameUID {
			scoped, fence = s.scopeTools()
		}
		s.exec.Rulesets = launch.NewScopedCache(agent.SafePath, 0, scoped, fence)
	} else if cfg.SameUID {
		s.scopeErr = errors.New("Landlock is unavailable")
		if cfg.Launcher == "" {
			s.scopeErr = errors.New("no Launcher: Landlock is off")
		}
	}
	s.files = &fs.Handlers{WS: ws, Wrote: s.lspWrote}
	s.search = &search.Handler{WS: ws}
	s.archive = &archive.Handlers{WS: ws, Log: s.log, Wrote: s.lspWrote}
	s.proc = &proc.Handlers{Keeper: proc.NewKeeper(cfg.ProcDir, cfg.Launcher, cfg.Log), Exec: s.exec, Log: s.log}
	s.tty = &tty.Manager{Exec: s.exec, Log: s.log.With("component", "tty")}
	s.ops = map[string]op.Handler{
		agent.OpPing:       s.ping,
		agent.OpStat:       s.files.Stat,
		agent.OpRead:       s.files.Read,
		agent.OpWrite:      s.files.Write,
		agent.OpList:       s.files.List,
		agent.OpRemove:     s.files.Remove,
		agent.OpRename:     s.files.Rename,
		agent.OpMkdir:      s.files.Mkdir,
		agent.OpSearch:     s.search.Search,
		agent.OpExec:       s.exec.Exec,
		agent.OpProcStart:  s.proc.Start,
		agent.OpProcList:   s.proc.List,
		agent.OpProcOutput: s.proc.Output,
		agent.OpProcKill:   s.proc.Kill,
		agent.OpTarOut:     s.archive.TarOut,
		agent.OpTarIn:      s.archive.TarIn,
		agent.OpCheck:      s.files.Check,
		agent.OpLSP:        s.lspCall,
		agent.OpTermRun:    s.termRun,
		agent.OpTermRead:   s.termRead,
		agent.OpTermInfo:   s.termInfo,
		agent.OpTermClose:  s.termClose,
		agent.OpUsage:      s.usage,
		agent.OpTTYOpen:    s.tty.Open,
		agent.OpTTYList:    s.tty.List,
		agent.OpTTYGet:     s.tty.Get,
		agent.OpTTYClose:   s.tty.Close,
		agent.OpTTYResize:  s.tty.Resize,
		agent.OpTTYSignal:  s.tty.Signal,
		agent.OpTTYInput:   s.tty.Input,
		agent.OpTTYAttach:  s.tty.Attach,
		agent.OpTTYScreen:  s.tty.Screen,
	}
	return s, nil
}

// Serve accepts connections until l is closed.
func (s *Server) Serve(l net.Listener) error {
	for {
		conn, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go s.ServeConn(conn)
	}
}

// ServeConn runs the handshake and then serves calls on conn until it closes.
func (s *Server) ServeConn(conn io.ReadWriteCloser) {
	defer conn.Close()
	peer, err := agent.ReadHello(conn)
	if err != nil {
		s.log.Warn("handshake failed", "err", err)
		return
	}
	ours := agent.Hello{Protocol: agent.ProtocolVersion, Version: s.cfg.Version}
	if peer.Protocol != agent.ProtocolVersion {
		ours.Error = fmt.Sprintf("protocol %d not supported, this agent speaks %d", peer.Protocol, agent.ProtocolVersion)
		_ = agent.WriteHello(conn, ours)
		s.log.Warn("refused host with another protocol", "host_protocol", peer.Protocol, "host_version", peer.Version)
		return
	}
	if uc, ok := conn.(*net.UnixConn); ok && peer.Root {
		// The host shares this kernel: it gets the workspace root to read from itself
		// (agent/local.go).
		err = agent.WriteHelloRights(uc, ours, s.ws.FD())
	} else {
		err = agent.WriteHello(conn, ours)
	}
	if err != nil {
		return
	}
	mux := agent.MuxConn(conn)
	sess, err := yamux.Server(mux, agent.YamuxConfig())
	if err != nil {
		return
	}
	host := egressHost{sess: sess}
	if _, unix := conn.(*net.UnixConn); unix && peer.EgressConns {
		host.send, _ = mux.(agent.ConnSender)
	}
	s.mu.Lock()
	s.conns[sess] = struct{}{}
	s.mu.Unlock()
	if peer.Egress {
		s.egressHosts.add(host)
	}
	defer func() {
		s.egressHosts.remove(sess)
		s.mu.Lock()
		delete(s.conns, sess)
		s.mu.Unlock()
		sess.Close()
	}()
	s.log.Info("host connected", "host_version", peer.Version)
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			s.log.Info("host disconnected", "err", err)
			return
		}
		go s.serveStream(st)
	}
}

// Close ends every connection and kills the language servers. Background processes
// keep running.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sess := range s.conns {
		sess.Close()
	}
	s.closeLSP()
}

// serveStream handles one call: request frame, events, done frame.
func (s *Server) serveStream(st *yamux.Stream) {
	defer s.idle.busy()()
	defer st.Close()
	h, body, err := agent.ReadFrame(st)
	if err != nil {
		return
	}
	if h.Op == agent.OpDial {
		s.dial(st, h.Args) // the stream becomes the connection
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := op.NewResponder(st)
	var pw *io.PipeWriter
	if h.Stream {
		r.In, pw = io.Pipe()
	}
	// Further frames: a streamed body's data and eof, or a cancel. EOF or a broken stream
	// also means the host gave up.
	go func() {
		for {
			f, data, err := agent.ReadFrame(st)
			switch {
			case err != nil || f.Cancel:
				cancel()
				if pw != nil {
					pw.CloseWithError(context.Canceled)
				}
				return
			case pw != nil && f.Event == agent.EventData:
				if _, err := pw.Write(data); err != nil {
					pw = nil // the handler stopped reading
				}
			case pw != nil && f.Event == agent.EventEOF:
				pw.Close()
				pw = nil
			}
		}
	}()

	// A request with an id is answered once: a retry gets the first outcome. It runs to
	// the end even if its stream breaks, so that the outcome is whole.
	var oc *outcome
	inDoubt := false
	if h.ID != "" && !h.Stream {
		first := false
		if oc, first, inDoubt = s.seen.begin(h.ID); !first {
			select {
			case <-oc.done:
				if err := r.Send(oc.h, oc.body); err != nil {
					s.log.Warn("answer not sent", "op", h.Op, "err", err)
				}
			case <-ctx.Done():
			}
			return
		}
		ctx = context.WithoutCancel(ctx)
	}
	var res any
	op, ok := s.ops[h.Op]
	if !ok {
		err = agent.Errorf(agent.CodeInvalid, "", "unknown operation %q", h.Op)
	} else {
		if h.Op == agent.OpExec || h.Op == agent.OpProcStart || h.Op == agent.OpTermRun {
			_ = r.Send(&agent.Header{Event: agent.EventStarted}, nil)
		}
		res, err = op(ctx, h.Args, body, r)
		if inDoubt && err != nil {
			res, err = s.settle(h, res, err)
		}
	}
	done, out := doneFrame(res, err)
	if oc != nil {
		s.seen.finish(h.ID, oc, done, out)
	}
	if err := r.Send(done, out); err != nil {
		s.log.Warn("answer not sent", "op", h.Op, "err", err)
	}
}

// doneFrame is the frame that ends a call: its result (and body), or its error.
func doneFrame(res any, err error) (*agent.Header, []byte) {
	done := &agent.Header{Done: true}
	var out []byte
	if bc, ok := res.(agent.BodyCarrier); ok && err == nil {
		out = bc.Body()
	}
	if err != nil {
		done.Error = wireError(err)
	} else if res != nil {
		if done.Result, err = json.Marshal(res); err != nil {
			done.Error = wireError(err)
		}
	}
	if !fits(done, out) { // answer.go
		done = &agent.Header{Done: true, Error: answerTooLarge(headerSize(done), len(out))}
		out = nil
	}
	return done, out
}

func (s *Server) ping(ctx context.Context, args json.RawMessage, body []byte, r *op.Responder) (any, error) {
	return agent.PingResult{Protocol: agent.ProtocolVersion, Version: s.cfg.Version, UID: os.Getuid(), PID: os.Getpid(), Landlock: s.landlock,
		SameUID: s.cfg.SameUID, Scoped: s.scoped}, nil
}

// scopeTools makes every tool process start in a scoped Landlock domain of its own,
// fenced off the agent's directories (Config.SameUID, Config.Fenced), and returns the
// scopes and the fence the policies' rulesets must add; 0 and nil, with s.scopeErr
// saying why, where it can't.
func (s *Server) scopeTools() (uint64, *launch.Fence) {
	scoped := launch.Scopes()
	if scoped == 0 {
		s.scopeErr = fmt.Errorf("Landlock ABI %d can't scope a domain (ABI %d can)", s.landlock, launch.ScopeABI)
		return 0, nil
	}
	var fence *launch.Fence
	if len(s.cfg.Fenced) > 0 {
		var err error
		if fence, err = launch.NewFence(s.cfg.Fenced...); err != nil {
			// The scopes still keep the tools from signalling or tracing the agent:
			// go on with them alone, and say loudly what is not protected.
			s.log.Error("same-uid mode WITHOUT the write fence: tool processes can change the agent's directories", "fenced", s.cfg.Fenced, "err", err)
			fence = nil
		}
	}
	rs, err := launch.NewScopeRuleset(scoped, fence)
	if err != nil && fence != nil {
		s.log.Error("same-uid mode WITHOUT the write fence: tool processes can change the agent's directories", "fenced", s.cfg.Fenced, "err", err)
		fence = nil
		rs, err = launch.NewScopeRuleset(scoped, nil)
	}
	if err != nil {
		s.scopeErr = err
		return 0, nil
	}
	s.fenced = fence != nil
	// The native launcher when it is installed beside the agent and works.
	launcher, err := launch.Native(s.cfg.Launcher, rs)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("native launcher unusable: commands start through the agent binary", "err", err)
	}
	s.log.Info("same-uid mode: tool processes start in scoped Landlock domains of their own", "launcher", launcher, "fenced", fence.Fenced())
	s.exec.Scope, s.exec.Launcher, s.scoped = rs, launcher, true
	return scoped, fence
}

// Fenced reports whether every tool process's domain keeps it from writing beneath the
// agent's directories (Config.Fenced).
func (s *Server) Fenced() bool { return s.fenced }

// Landlock returns the Landlock ABI version commands are restricted with, 0 when they
// run unenforced (no Landlock, or no Launcher configured).
func (s *Server) Landlock() int { return s.landlock }

// Scoped reports whether every tool process starts inside a scoped Landlock domain
// (Config.SameUID); when SameUID asked for it and it can't, err says why.
func (s *Server) Scoped() (scoped bool, err error) { return s.scoped, s.scopeErr }
