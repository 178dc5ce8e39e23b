// Package server is the cws-agent's side of the wire protocol: it accepts bridged
// connections, runs the handshake and a yamux session on each, and serves the
// operations of package agent against the workspace directory.
//
// Every path is resolved beneath the workspace through an os.Root, so no spelling and no
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
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/launch"
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
}

// Server serves agent operations. The background processes are the Server's keeper's
// (proc.go), so they outlive any one connection, and with a keeper process the Server
// too.
type Server struct {
	cfg   Config
	log   *slog.Logger
	ws    *workspace
	procs keeper // the background processes (proc.go)
	ops   map[string]handler
	seen  *outcomes // answers to recent requests with ids (dedupe.go)
	// landlock is the Landlock ABI commands are restricted with; 0: commands with an
	// ExecPolicy run unenforced (or are refused when it requires Landlock).
	landlock int
	rulesets *launch.Cache // each ExecPolicy's Landlock ruleset (launcher.go); nil without Landlock
	lsp      lspHost       // the language servers (lsp.go)
	idle     *idleRelease

	mu    sync.Mutex
	conns map[*yamux.Session]struct{}
}

// handler runs one operation. It may send events through r while it runs; its result
// goes out in the done frame.
type handler func(ctx context.Context, args json.RawMessage, body []byte, r *responder) (any, error)

// New opens the workspace root and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Root == "" {
		cfg.Root = "/workspace"
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	ws, err := openWorkspace(cfg.Root)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Log, ws: ws, procs: newKeeper(cfg), conns: map[*yamux.Session]struct{}{}, seen: newOutcomes(cfg.StateDir)}
	s.idle = newIdleRelease(cfg.ReleaseIdle)
	if cfg.Launcher != "" {
		s.landlock = launch.ABI()
	}
	if s.landlock > 0 {
		s.rulesets = launch.NewCache(agent.SafePath, 0)
	}
	s.ops = map[string]handler{
		agent.OpPing:       s.ping,
		agent.OpStat:       s.stat,
		agent.OpRead:       s.read,
		agent.OpWrite:      s.write,
		agent.OpList:       s.list,
		agent.OpRemove:     s.remove,
		agent.OpRename:     s.rename,
		agent.OpMkdir:      s.mkdir,
		agent.OpSearch:     s.search,
		agent.OpExec:       s.exec,
		agent.OpProcStart:  s.procStart,
		agent.OpProcList:   s.procList,
		agent.OpProcOutput: s.procOutput,
		agent.OpProcKill:   s.procKill,
		agent.OpTarOut:     s.tarOut,
		agent.OpTarIn:      s.tarIn,
		agent.OpCheck:      s.check,
		agent.OpLSP:        s.lspCall,
		agent.OpTermRun:    s.termRun,
		agent.OpTermRead:   s.termRead,
		agent.OpTermInfo:   s.termInfo,
		agent.OpTermClose:  s.termClose,
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
		err = agent.WriteHelloRights(uc, ours, s.ws.fd)
	} else {
		err = agent.WriteHello(conn, ours)
	}
	if err != nil {
		return
	}
	sess, err := yamux.Server(agent.MuxConn(conn), agent.YamuxConfig())
	if err != nil {
		return
	}
	s.mu.Lock()
	s.conns[sess] = struct{}{}
	s.mu.Unlock()
	defer func() {
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &responder{w: st}
	var pw *io.PipeWriter
	if h.Stream {
		r.in, pw = io.Pipe()
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
				if err := r.send(oc.h, oc.body); err != nil {
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
			_ = r.send(&agent.Header{Event: agent.EventStarted}, nil)
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
	if err := r.send(done, out); err != nil {
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

// responder serialises the frames one call sends back, and holds a streamed request body.
type responder struct {
	mu sync.Mutex
	w  io.Writer
	in io.Reader // the request body of a streamed call; nil otherwise
	// held are encoded event frames that go out with the next frame (see hold).
	held []byte
}

// holdMax bounds the event frames a responder holds back.
const holdMax = 64 << 10

// send writes one frame, after any held ones, in one write.
func (r *responder) send(h *agent.Header, body []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.held) == 0 {
		return agent.WriteFrame(r.w, h, body)
	}
	buf, err := agent.AppendFrame(r.held, h, body)
	r.held = nil
	if err != nil {
		return err
	}
	_, err = r.w.Write(buf)
	return err
}

// hold sends event frames that are not live output (a file's content) with the frame
// after them: a small reply, its data and its done frame, is one write on the stream
// and one frame on the connection. Held frames never exceed holdMax.
func (r *responder) hold(ev string, data []byte) error {
	if len(data) > holdMax {
		return r.event(ev, data)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.held)+len(data) > holdMax {
		if _, err := r.w.Write(r.held); err != nil {
			return err
		}
		r.held = r.held[:0]
	}
	var err error
	r.held, err = agent.AppendFrame(r.held, &agent.Header{Event: ev}, data)
	return err
}

// event sends one event frame, splitting data into chunks the frame limit allows.
func (r *responder) event(ev string, data []byte) error {
	for len(data) > 0 {
		n := min(len(data), agent.ChunkSize)
		if err := r.send(&agent.Header{Event: ev}, data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

func decode(args json.RawMessage, v any) error {
	if len(args) == 0 {
		return nil
	}
	if err := json.Unmarshal(args, v); err != nil {
		return agent.Errorf(agent.CodeInvalid, "", "bad arguments: %v", err)
	}
	return nil
}

func (s *Server) ping(ctx context.Context, args json.RawMessage, body []byte, r *responder) (any, error) {
	return agent.PingResult{Protocol: agent.ProtocolVersion, Version: s.cfg.Version, UID: os.Getuid(), PID: os.Getpid(), Landlock: s.landlock}, nil
}

// Landlock returns the Landlock ABI version commands are restricted with, 0 when they
// run unenforced (no Landlock, or no Launcher configured).
func (s *Server) Landlock() int { return s.landlock }
