package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/terminal"
)

// Interactive terminals through the REST API and its WebSocket (the MCP tools are the
// terminal toolset's): a program on a PTY in the session's sandbox, kept by its agent
// (sandbox/agent/server/tty). Every entry needs scope tools:exec and the tenant's
// terminal toolset; opening one and attaching wake a sleeping session.

// TerminalObserver is what an Observer may implement to count terminals: the running
// ones by tenant (as last seen), attaches, the bytes through them, and the times a
// viewer too slow to keep up skipped output.
type TerminalObserver interface {
	TerminalsRunning(tenant string, n int)
	TerminalAttach(tenant string)
	TerminalBytes(tenant, direction string, n int64)
	TerminalSkipped(tenant string)
}

// terminalCounts is what the service last saw of each session's running terminals.
type terminalCounts struct {
	mu   sync.Mutex
	runs map[string]map[string]int // tenant → session → running terminals
}

// noteTerminals records that session runs n terminals, and exports the tenant's sum.
func (s *Service) noteTerminals(tenant, session string, n int) {
	to, ok := s.obs.(TerminalObserver)
	if !ok {
		return
	}
	tc := &s.terminals
	tc.mu.Lock()
	if tc.runs == nil {
		tc.runs = map[string]map[string]int{}
	}
	if tc.runs[tenant] == nil {
		tc.runs[tenant] = map[string]int{}
	}
	if n > 0 {
		tc.runs[tenant][session] = n
	} else {
		delete(tc.runs[tenant], session)
	}
	sum := 0
	for _, v := range tc.runs[tenant] {
		sum += v
	}
	tc.mu.Unlock()
	to.TerminalsRunning(tenant, sum)
}

// countTerminals asks the agent how many terminals run, and notes it.
func (s *Service) countTerminals(ctx context.Context, c *call) {
	ts, err := c.agent.TTYList(ctx)
	if err == nil {
		s.noteTerminals(c.sess.Tenant, c.sess.ID, running(ts))
	}
}

func running(ts []agent.TTYInfo) int {
	n := 0
	for _, t := range ts {
		if t.Running {
			n++
		}
	}
	return n
}

// terminalCall checks that caller may use terminals in session id (scope tools:exec,
// the tenant's terminal toolset, its rate) and returns the call with the session's
// policy. A sleeping session wakes when wake is set; otherwise its call comes back
// asleep, with no agent: what the suspend kept answers for it.
func (s *Service) terminalCall(ctx context.Context, caller Caller, id, what string, wake bool) (c *call, asleep bool, err error) {
	if err := caller.need(auth.ScopeToolsExec, what); err != nil {
		return nil, false, err
	}
	tp, _ := s.cfg.Tenants.Policy(caller.Tenant)
	if tp != nil && !toolsetEnabled(tp, policy.ToolsetTerminal) {
		return nil, false, &policy.Violation{Err: ErrPolicy, Rule: "toolsets", Detail: fmt.Sprintf("toolset %q is not enabled for this tenant", policy.ToolsetTerminal)}
	}
	if err := s.allow(ctx, caller.Tenant, tp); err != nil {
		return nil, false, err
	}
	if !wake {
		sess, err := s.getSession(ctx, caller, id)
		if err != nil {
			return nil, false, err
		}
		if sess.Asleep() {
			return &call{svc: s, sess: sess, caller: caller, tool: what}, true, nil
		}
	}
	sess, _, err := s.session(ctx, caller, id)
	if err != nil {
		return nil, false, err
	}
	c = &call{svc: s, sess: sess, caller: caller, agent: s.agentFor(sess.Sandbox), tool: what}
	eff, err := s.effectivePolicy(ctx, c, tp)
	if err != nil {
		return nil, false, err
	}
	g := eff.Guard()
	c.pol, c.guard = eff, &g
	s.renew(ctx, sess)
	return c, false, nil
}

// errNoTerminal is the answer for a terminal a sleeping session doesn't know.
func errNoTerminal(tid string) error {
	return fmt.Errorf("%w: no terminal %q", ErrNotFound, tid)
}

// terminalError maps the agent's answers about terminals to the domain's errors.
func terminalError(err error) error {
	var we *agent.WireError
	if errors.As(err, &we) {
		switch {
		case we.Code == agent.CodeNotFound:
			return fmt.Errorf("%w: %s", ErrNotFound, we.Message)
		case we.Code == agent.CodeTooLarge && we.Rule == "maxTerminals":
			return &policy.Violation{Err: ErrQuota, Rule: "maxTerminals", Detail: we.Message}
		case we.Code == agent.CodeInvalid && we.Path != "":
			return &policy.Violation{Err: ErrInvalid, Rule: we.Path, Detail: we.Message}
		}
	}
	return mapAgentError(err)
}

// auditTerminal records a terminal's open, close or attach: its size and who, never
// what was typed.
func (s *Service) auditTerminal(c *call, what string, in agent.TTYInfo, outcome string, out, inBytes int64) {
	args, _ := json.Marshal(map[string]any{"cols": in.Cols, "rows": in.Rows, "command": firstOr(in.Argv, "")})
	s.record(AuditRecord{Time: s.cfg.Now().UTC(), Tenant: c.caller.Tenant, Subject: c.caller.Subject, Session: c.sess.ID,
		Tool: "terminal." + what, Decision: "allow", Outcome: outcome, Target: in.ID, Args: string(args), BytesOut: out, BytesIn: inBytes})
}

func firstOr(s []string, dflt string) string {
	if len(s) == 0 {
		return dflt
	}
	return s[0]
}

// OpenTerminal starts a program on a new terminal in session id.
func (s *Service) OpenTerminal(ctx context.Context, caller Caller, id string, o terminal.Open) (*terminal.Info, error) {
	c, _, err := s.terminalCall(ctx, caller, id, "open a terminal", true)
	if err != nil {
		return nil, err
	}
	a, err := o.Request(c.pol, c.guard)
	if err != nil {
		return nil, err
	}
	t, err := c.agent.TTYOpen(ctx, a)
	if err != nil {
		return nil, terminalError(err)
	}
	if t.Unenforced {
		s.obs.ExecUnenforced()
	}
	s.auditTerminal(c, "open", t, "ok", 0, 0)
	s.countTerminals(ctx, c)
	in := terminal.InfoOf(t)
	return &in, nil
}

// ListTerminals lists session id's terminals, running and ended (those a suspend ended
// too), oldest first.
func (s *Service) ListTerminals(ctx context.Context, caller Caller, id string) ([]terminal.Info, error) {
	c, asleep, err := s.terminalCall(ctx, caller, id, "list terminals", false)
	if err != nil {
		return nil, err
	}
	var ts []agent.TTYInfo
	if !asleep {
		if ts, err = c.agent.TTYList(ctx); err != nil {
			return nil, terminalError(err)
		}
		s.noteTerminals(c.sess.Tenant, c.sess.ID, running(ts))
	}
	out := []terminal.Info{}
	for _, k := range s.suspendedTerminals(ctx, c) {
		if !slices.ContainsFunc(ts, func(t agent.TTYInfo) bool { return t.ID == k.Info.ID }) {
			out = append(out, terminal.InfoOf(k.Info))
		}
	}
	for _, t := range ts {
		out = append(out, terminal.InfoOf(t))
	}
	return out, nil
}

// GetTerminal describes one terminal of session id.
func (s *Service) GetTerminal(ctx context.Context, caller Caller, id, tid string) (*terminal.Info, error) {
	c, asleep, err := s.terminalCall(ctx, caller, id, "get a terminal", false)
	if err != nil {
		return nil, err
	}
	var t agent.TTYInfo
	if asleep {
		err = &agent.WireError{Code: agent.CodeNotFound, Message: errNoTerminal(tid).Error()}
	} else {
		t, err = c.agent.TTYGet(ctx, tid)
	}
	if errors.Is(err, agent.ErrNotFound) {
		if k, ok := terminal.FindSuspended(s.suspendedTerminals(ctx, c), tid); ok {
			t, err = k.Info, nil
		}
	}
	if err != nil {
		return nil, terminalError(err)
	}
	in := terminal.InfoOf(t)
	return &in, nil
}

// CloseTerminal ends a terminal of session id (its program is hung up, then killed).
func (s *Service) CloseTerminal(ctx context.Context, caller Caller, id, tid string) (*terminal.Info, error) {
	c, asleep, err := s.terminalCall(ctx, caller, id, "close a terminal", false)
	if err != nil {
		return nil, err
	}
	var t agent.TTYInfo
	if asleep {
		err = &agent.WireError{Code: agent.CodeNotFound, Message: errNoTerminal(tid).Error()}
	} else {
		t, err = c.agent.TTYClose(ctx, tid)
	}
	if errors.Is(err, agent.ErrNotFound) {
		if k, ok := terminal.FindSuspended(s.suspendedTerminals(ctx, c), tid); ok {
			t, err = k.Info, nil // ended by the suspend already
		}
	}
	if err != nil {
		return nil, terminalError(err)
	}
	s.auditTerminal(c, "close", t, "ok", 0, 0)
	if !asleep {
		s.countTerminals(ctx, c)
	}
	in := terminal.InfoOf(t)
	return &in, nil
}

// suspendedTerminals are the terminals the last suspend of c's session ended.
func (s *Service) suspendedTerminals(ctx context.Context, c *call) []terminal.Suspended {
	var kept []terminal.Suspended
	if _, err := c.State().Get(ctx, terminal.SuspendedKey, &kept); err != nil {
		return nil
	}
	return kept
}

// suspendedTerminalsKept is how many ended-by-suspend terminals a session remembers,
// and suspendedScrollback how many of each one's scrolled-off lines.
const (
	suspendedTerminalsKept = 16
	suspendedScrollback    = 200
)

// saveSuspendedTerminals keeps the session's terminals, with their last screen, before
// its sandbox stops (terminal.SuspendedKey).
func (s *Service) saveSuspendedTerminals(ctx context.Context, sess *Session) error {
	a := s.agentFor(sess.Sandbox)
	ts, err := a.TTYList(ctx)
	s.noteTerminals(sess.Tenant, sess.ID, 0)
	if err != nil || len(ts) == 0 {
		return err
	}
	st := &state{store: s.cfg.Store, tenant: sess.Tenant, id: sess.ID}
	var kept []terminal.Suspended
	_, _ = st.Get(ctx, terminal.SuspendedKey, &kept)
	now := s.cfg.Now().UTC()
	for _, t := range ts {
		k := terminal.Suspended{Info: t}
		if scr, err := a.TTYScreen(ctx, agent.TTYScreenArgs{ID: t.ID, Scrollback: suspendedScrollback}); err == nil {
			k.Screen = scr
		}
		if k.Info.Running {
			k.Info.Running, k.Info.EndedAt, k.Info.EndReason = false, &now, agent.TTYSuspended
		}
		k.Screen.Info = k.Info
		kept = append(slices.DeleteFunc(kept, func(o terminal.Suspended) bool { return o.Info.ID == t.ID }), k)
	}
	if len(kept) > suspendedTerminalsKept {
		kept = kept[len(kept)-suspendedTerminalsKept:]
	}
	return st.Put(ctx, terminal.SuspendedKey, kept)
}

// TerminalAttachment is one viewer's way to a terminal: its stream, and the controls.
type TerminalAttachment struct {
	svc *Service
	c   *call
	tid string
	// Info is the terminal as it was at attach.
	Info terminal.Info
	// kept is what a suspend kept of a terminal it ended: the attach shows its last
	// screen and ends.
	kept *terminal.Suspended
}

// AttachTerminal checks that caller may attach to terminal tid of session id (which
// wakes), and that it exists.
func (s *Service) AttachTerminal(ctx context.Context, caller Caller, id, tid string) (*TerminalAttachment, error) {
	c, _, err := s.terminalCall(ctx, caller, id, "attach a terminal", true)
	if err != nil {
		return nil, err
	}
	t, err := c.agent.TTYGet(ctx, tid)
	if errors.Is(err, agent.ErrNotFound) {
		if k, ok := terminal.FindSuspended(s.suspendedTerminals(ctx, c), tid); ok {
			return &TerminalAttachment{svc: s, c: c, tid: tid, Info: terminal.InfoOf(k.Info), kept: &k}, nil
		}
	}
	if err != nil {
		return nil, terminalError(err)
	}
	return &TerminalAttachment{svc: s, c: c, tid: tid, Info: terminal.InfoOf(t)}, nil
}

// countingReader counts what is read through it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (cr *countingReader) Read(p []byte) (int, error) {
	n, err := cr.r.Read(p)
	cr.n.Add(int64(n))
	return n, err
}

// Stream attaches a viewer until the program ends (its Info then) or ctx ends: input is
// typed into the terminal unless readOnly; output gets the scrollback first, then the
// output as it comes, and skipped(n) when the viewer fell behind and n bytes were
// dropped. output must not block for long: a viewer that does falls behind.
func (ta *TerminalAttachment) Stream(ctx context.Context, readOnly bool, input io.Reader, output func([]byte) error, skipped func(int64) error) (*terminal.Info, error) {
	s, c := ta.svc, ta.c
	if ta.kept != nil { // ended by a suspend: its last screen, then its end
		lines := append(slices.Clone(ta.kept.Screen.Scrollback), ta.kept.Screen.Lines...)
		for len(lines) > 0 && lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		if err := output([]byte(strings.Join(lines, "\r\n") + "\r\n")); err != nil {
			return nil, err
		}
		return &ta.Info, nil
	}
	to, _ := s.obs.(TerminalObserver)
	if to != nil {
		to.TerminalAttach(c.sess.Tenant)
	}
	in := &countingReader{r: input}
	var out int64
	start := time.Now()
	t, err := c.agent.TTYAttach(ctx, agent.TTYAttachArgs{ID: ta.tid, ReadOnly: readOnly}, in, func(ev string, p []byte) error {
		switch ev {
		case agent.EventData:
			out += int64(len(p))
			return output(p)
		case agent.EventSkipped:
			if to != nil {
				to.TerminalSkipped(c.sess.Tenant)
			}
			n, _ := strconv.ParseInt(string(p), 10, 64)
			return skipped(n)
		}
		return nil
	})
	if to != nil {
		to.TerminalBytes(c.sess.Tenant, "out", out)
		to.TerminalBytes(c.sess.Tenant, "in", in.n.Load())
	}
	info := t
	if err != nil {
		info = agent.TTYInfo{ID: ta.tid, Cols: ta.Info.Cols, Rows: ta.Info.Rows}
	}
	rec := AuditRecord{Time: start.UTC(), Tenant: c.caller.Tenant, Subject: c.caller.Subject, Session: c.sess.ID,
		Tool: "terminal.attach", Decision: "allow", Outcome: "ok", Duration: time.Since(start).Seconds(), Target: ta.tid,
		BytesOut: out, BytesIn: in.n.Load()}
	if readOnly {
		rec.Args = `{"readonly":true}`
	}
	s.record(rec)
	if err != nil {
		return nil, terminalError(err)
	}
	s.countTerminals(context.WithoutCancel(ctx), c)
	ti := terminal.InfoOf(info)
	return &ti, nil
}

// Resize sets the terminal's size.
func (ta *TerminalAttachment) Resize(ctx context.Context, cols, rows int) error {
	if err := terminal.Resize(cols, rows); err != nil {
		return err
	}
	return terminalError0(ta.c.agent.TTYResize(ctx, agent.TTYResizeArgs{ID: ta.tid, Cols: cols, Rows: rows}))
}

// Signal signals the terminal's foreground process group ("INT", "TERM", …).
func (ta *TerminalAttachment) Signal(ctx context.Context, name string) error {
	return terminalError0(ta.c.agent.TTYSignal(ctx, agent.TTYSignalArgs{ID: ta.tid, Signal: name}))
}

func terminalError0(err error) error {
	if err == nil {
		return nil
	}
	return terminalError(err)
}
