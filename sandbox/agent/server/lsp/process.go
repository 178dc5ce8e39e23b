package lsp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/cwsdev/cws/sandbox/agent/ident"
)

// server is one running language server process and its connection.
type server struct {
	m    *Manager
	lang *Language
	name string // the program's base name, for logs: "gopls"
	cmd  *exec.Cmd
	conn *jsonrpc2.Conn
	done chan struct{} // closed when the process has exited
	err  error         // why it exited; read after done

	enc      Encoding
	caps     capabilities
	started  time.Time
	stopping atomic.Bool // a deliberate stop: its exit is not a crash
	// projected: the files of its configless project were opened (project.go).
	projected atomic.Bool

	ids      atomic.Int64
	inflight atomic.Int32
	lastUsed atomic.Int64 // unix nanoseconds

	syncMu sync.Mutex // one document sync at a time, so versions only grow

	mu       sync.Mutex
	docs     map[string]*document        // by URI as sent to the server
	dirs     map[string]map[string]stamp // what watch saw, by directory
	diags    map[string]*published
	seq      uint64        // counts syncs and publishes, to order them
	useClock uint64        // counts document uses, for eviction
	watchSeq uint64        // seq of the last didChangeWatchedFiles
	publish  chan struct{} // closed and replaced at each publishDiagnostics
}

// document is what the server was last told about one file.
type document struct {
	rel     string
	version int
	hash    [32]byte
	src     []byte // the content last synced, as the Files gave it
	seq     uint64 // when it was last synced
	used    uint64 // when it was last synced or checked
}

// published is the last publishDiagnostics for one URI.
type published struct {
	version *int
	diags   []diagnostic
	seq     uint64
}

// capabilities is the part of the server's capabilities the manager acts on.
type capabilities struct {
	PositionEncoding   Encoding        `json:"positionEncoding"`
	DiagnosticProvider json.RawMessage `json:"diagnosticProvider"`
	CodeActionProvider json.RawMessage `json:"codeActionProvider"`
}

// pullDiagnostics reports whether the server answers textDocument/diagnostic.
func (c capabilities) pullDiagnostics() bool {
	return len(c.DiagnosticProvider) > 0 && string(c.DiagnosticProvider) != "null" && string(c.DiagnosticProvider) != "false"
}

// resolveCodeActions reports whether the server fills in code actions' edits lazily.
func (c capabilities) resolveCodeActions() bool {
	var p struct {
		ResolveProvider bool `json:"resolveProvider"`
	}
	return json.Unmarshal(c.CodeActionProvider, &p) == nil && p.ResolveProvider
}

// stdio joins the server's stdout and stdin into the connection's stream.
type stdio struct {
	io.ReadCloser
	io.WriteCloser
}

func (s stdio) Close() error {
	err := s.WriteCloser.Close()
	if rerr := s.ReadCloser.Close(); err == nil {
		err = rerr
	}
	return err
}

// start runs one of lang's servers and initializes it.
func (m *Manager) start(ctx context.Context, lang *Language) (*server, error) {
	c, bin, err := m.find(lang)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, c.Args...)
	cmd.Dir = m.cfg.Root
	cmd.Env = m.environ(lang)
	// Its own process group, so a stop kills whatever it started too; and it dies with
	// the agent.
	// It runs as the tool user, never as the agent (package ident).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: ident.Credential()}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	exited, err := startHeld(cmd, m.cfg.Start)
	if err != nil {
		return nil, fmt.Errorf("start %s for %s: %w", bin, lang.Name, err)
	}
	s := &server{
		m: m, lang: lang, name: filepath.Base(bin), cmd: cmd, done: make(chan struct{}),
		enc: UTF16, started: time.Now(), docs: map[string]*document{}, diags: map[string]*published{},
		dirs:    map[string]map[string]stamp{},
		publish: make(chan struct{}),
	}
	s.touch()
	s.conn = jsonrpc2.NewConn(context.Background(), jsonrpc2.NewBufferedStream(stdio{stdout, stdin}, jsonrpc2.VSCodeObjectCodec{}),
		handlerFunc(s.dispatch), jsonrpc2.SetLogger(discard{}))
	go s.logStderr(stderr)
	go func() {
		s.err = <-exited
		close(s.done)
		s.conn.Close()
		m.exited(s)
	}()

	if err := s.initialize(ctx); err != nil {
		s.kill()
		<-s.done
		return nil, fmt.Errorf("initialize %s: %w", s.name, err)
	}
	m.log.Info("language server started", "server", s.name, "language", lang.Name, "pid", cmd.Process.Pid, "encoding", s.enc)
	return s, nil
}

// startHeld starts cmd from a thread that stays locked to it until the process ends,
// and returns its Wait's outcome: the kernel sends the Pdeathsig when the thread that
// forked the process ends, not the agent, and the agent does end threads (package
// launch forks each restricted command from a thread it then discards). start, when
// not nil, is what starts it (Config.Start) in place of cmd.Start.
func startHeld(cmd *exec.Cmd, start func(*exec.Cmd) error) (<-chan error, error) {
	started, exited := make(chan error, 1), make(chan error, 1)
	if start == nil {
		start = (*exec.Cmd).Start
	}
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := start(cmd); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	return exited, <-started
}

func (m *Manager) environ(lang *Language) []string {
	env := map[string]string{}
	for _, kv := range m.cfg.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for k, v := range lang.Env {
		if _, set := env[k]; !set {
			env[k] = v
		}
	}
	env["PATH"] = m.cfg.Path
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// initializeTimeout bounds the initialize handshake (a server's loading happens later).
const initializeTimeout = 60 * time.Second

func (s *server) initialize(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, initializeTimeout)
	defer cancel()
	root := s.m.rootURI()
	params := map[string]any{
		// No process id: servers built on vscode-languageserver (typescript-language-server,
		// pyright) would check it every 3 s with kill(pid, 0), which fails with EPERM
		// because they run as the tool user and the agent does not, and exit. They die
		// with the agent anyway (Pdeathsig, their process group).
		"processId":        nil,
		"clientInfo":       map[string]string{"name": "cws-agent"},
		"rootUri":          root,
		"rootPath":         s.m.cfg.Root,
		"workspaceFolders": s.m.folders(),
		"capabilities":     json.RawMessage(clientCapabilities),
	}
	var res struct {
		Capabilities capabilities `json:"capabilities"`
	}
	if err := s.call(ctx, "initialize", params, &res); err != nil {
		return err
	}
	s.caps = res.Capabilities
	switch res.Capabilities.PositionEncoding {
	case UTF8, UTF32:
		s.enc = res.Capabilities.PositionEncoding
	}
	return s.conn.Notify(ctx, "initialized", struct{}{})
}

// clientCapabilities is what the agent tells servers it can do: plain locations and
// changes (no links, no document changes), hierarchical symbols, UTF-8 positions
// preferred, no edits applied by the server.
const clientCapabilities = `{
  "general": {"positionEncodings": ["utf-8", "utf-16"]},
  "workspace": {
    "configuration": true, "workspaceFolders": true, "applyEdit": false,
    "didChangeWatchedFiles": {"dynamicRegistration": true},
    "workspaceEdit": {"documentChanges": false},
    "symbol": {"symbolKind": {"valueSet": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26]}}
  },
  "textDocument": {
    "synchronization": {"dynamicRegistration": false, "didSave": false},
    "hover": {"contentFormat": ["markdown", "plaintext"]},
    "definition": {"linkSupport": false},
    "references": {},
    "completion": {"contextSupport": true, "completionItem": {"snippetSupport": false, "documentationFormat": ["markdown", "plaintext"]}},
    "documentSymbol": {"hierarchicalDocumentSymbolSupport": true, "symbolKind": {"valueSet": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26]}},
    "formatting": {},
    "rename": {"prepareSupport": false},
    "codeAction": {
      "codeActionLiteralSupport": {"codeActionKind": {"valueSet": ["", "quickfix", "refactor", "refactor.extract", "refactor.inline", "refactor.rewrite", "source", "source.organizeImports", "source.fixAll"]}},
      "dataSupport": true, "resolveSupport": {"properties": ["edit"]}
    },
    "publishDiagnostics": {"versionSupport": true},
    "diagnostic": {"dynamicRegistration": false},
    "callHierarchy": {}
  },
  "window": {"workDoneProgress": true}
}`

// call sends a request and waits for its answer; a canceled ctx cancels it at the server.
func (s *server) call(ctx context.Context, method string, params, result any) error {
	s.inflight.Add(1)
	defer func() {
		s.inflight.Add(-1)
		s.touch()
	}()
	id := jsonrpc2.ID{Num: uint64(s.ids.Add(1))}
	w, err := s.conn.DispatchCall(ctx, method, params, jsonrpc2.PickID(id))
	if err == nil {
		err = w.Wait(ctx, result)
	}
	if ctx.Err() != nil {
		_ = s.conn.Notify(context.WithoutCancel(ctx), "$/cancelRequest", map[string]any{"id": id.Num})
		return ctx.Err()
	}
	if errors.Is(err, jsonrpc2.ErrClosed) || s.exitedNow() {
		s.gone()
		return fmt.Errorf("%s %w during %s", s.name, errExited, method)
	}
	var re *jsonrpc2.Error
	if errors.As(err, &re) {
		return &serverError{server: s.name, method: method, code: re.Code, message: re.Message}
	}
	if err != nil && s.exitsSoon() {
		// A transport error (a broken pipe) from a server that is dying: the manager has
		// not seen it exit yet.
		return fmt.Errorf("%s %w during %s", s.name, errExited, method)
	}
	return err
}

// exitsSoon reports whether the server process ends within a moment.
func (s *server) exitsSoon() bool {
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-s.done:
		return true
	case <-t.C:
		return false
	}
}

// errExited: the server process went away while a request was out; the manager starts
// it again and retries once.
var errExited = errors.New("exited")

// serverError is a request the server answered with an error.
type serverError struct {
	server, method string
	code           int64
	message        string
}

func (e *serverError) Error() string {
	return fmt.Sprintf("%s: %s failed: %s (code %d)", e.server, e.method, e.message, e.code)
}

func (s *server) notify(ctx context.Context, method string, params any) error {
	err := s.conn.Notify(ctx, method, params)
	if errors.Is(err, jsonrpc2.ErrClosed) || s.exitedNow() {
		s.gone()
		return fmt.Errorf("%s %w during %s", s.name, errExited, method)
	}
	return err
}

func (s *server) touch() { s.lastUsed.Store(time.Now().UnixNano()) }

// exitedNow reports whether the server is gone: its process ended or its pipes closed
// (the connection sees EOF a moment before the process is reaped).
func (s *server) exitedNow() bool {
	select {
	case <-s.done:
		return true
	case <-s.conn.DisconnectNotify():
		return true
	default:
		return false
	}
}

// gone makes sure a server whose connection closed is really ended and reaped, so the
// retry that follows starts a fresh one instead of finding this one half dead.
func (s *server) gone() {
	if !s.exitsSoon() {
		s.kill()
		<-s.done
	}
}

// stop asks the server to shut down and exit, and kills its group if it doesn't in time.
func (s *server) stop(grace time.Duration) {
	s.stopping.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if s.call(ctx, "shutdown", nil, nil) == nil {
		_ = s.conn.Notify(ctx, "exit", nil)
	}
	select {
	case <-s.done:
	case <-ctx.Done():
	}
	s.kill()
	<-s.done
}

// kill ends the server's whole process group at once.
func (s *server) kill() {
	s.stopping.Store(true)
	if p := s.cmd.Process; p != nil {
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
		_ = p.Kill()
	}
}

// maxStderrLine bounds one stderr line kept in the log buffer.
const maxStderrLine = 4096

// logStderr keeps the server's stderr lines as debug log entries (a crash's panic
// shows up in get_server_logs).
func (s *server) logStderr(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if len(line) > maxStderrLine {
			line = line[:maxStderrLine] + "…"
		}
		s.m.logs.add(entry{Level: "debug", Message: line, Time: time.Now().UTC(), Server: s.name})
	}
	_, _ = io.Copy(io.Discard, r)
}

type discard struct{}

func (discard) Printf(string, ...any) {}
