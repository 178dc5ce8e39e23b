package workspace

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"github.com/cwsdev/cws/version"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/tool"
)

func versionString() string { return version.Version }

// Result is a tool call's outcome. IsError marks execution failures (file not found,
// non-zero exit, timeout): they are results for the agent to read, not protocol errors.
type Result struct {
	Value   any
	IsError bool
	// Note is a remark beside the value, e.g. how many locations in denied paths were
	// left out (a value implementing interface{ Note() string } sets it).
	Note string
}

// Failure is the Value of an IsError result that has no typed result of its own, and
// FailureDetail says what failed and where (see package tool).
type (
	Failure       = tool.Failure
	FailureDetail = tool.FailureDetail
)

// OutputFunc receives a running tool's output as it is produced (stream is "stdout" or
// "stderr"). It must not block for long.
type OutputFunc func(stream string, data []byte)

// CallOptions are per-call extras from the protocol layer.
type CallOptions struct {
	OnOutput OutputFunc
}

// call is one tool call's tool.Env: the session's agent, the effective policy and the
// caller.
type call struct {
	svc    *Service
	sess   *Session
	caller Caller
	agent  *agent.Client
	pol    *policy.Effective
	guard  *guard.Guard
	out    OutputFunc
	tool   string
	notes  []string // remarks the tool made (tool.Env.Note)
}

// Call runs one tool for caller in session id. Unknown tools and another tenant's
// session are errors; the token's scope is checked first (before the session is
// looked up), then the policy, before anything reaches the sandbox.
func (s *Service) Call(ctx context.Context, caller Caller, id, tool string, args json.RawMessage, opts CallOptions) (*Result, error) {
	start := s.cfg.Now()
	t, err := s.tool(start, caller, id, tool)
	if err != nil {
		return nil, err
	}
	sess, cached, err := s.session(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	res, err := s.runBusy(ctx, t, sess, caller, args, opts)
	if err != nil && (cached || errors.Is(err, ErrSessionLost)) {
		err = s.recheck(ctx, caller, id, err)
	}
	if err == nil {
		s.renew(ctx, sess)
	} else {
		s.noteLost(ctx, sess, err)
	}
	s.done(start, caller, sess.ID, t, args, res, err)
	return res, err
}

// runBusy is run, counted as a call under way on the session for its whole length: a
// session is not idle while one runs, however long (idleSuspend).
func (s *Service) runBusy(ctx context.Context, t *Tool, sess *Session, caller Caller, args json.RawMessage, opts CallOptions) (*Result, error) {
	s.inflightMu.Lock()
	s.inflight[sess.ID]++
	s.inflightMu.Unlock()
	defer s.idle(sess.ID)
	return s.run(ctx, t, sess, caller, args, opts)
}

// idle ends the count runBusy began.
func (s *Service) idle(id string) {
	s.inflightMu.Lock()
	if s.inflight[id]--; s.inflight[id] <= 0 {
		delete(s.inflight, id)
	}
	s.inflightMu.Unlock()
}

// calling reports whether a call of session id is under way on this replica.
func (s *Service) calling(id string) bool {
	s.inflightMu.Lock()
	defer s.inflightMu.Unlock()
	return s.inflight[id] > 0
}

// CallDefault is Call on the caller's default session (one per tenant and subject),
// which it creates on first use: /mcp without a session claim. Creating it this way
// needs only the tool's scope, not sessions, so an agent's token with tools scopes
// alone works; a call the token may not make creates nothing.
func (s *Service) CallDefault(ctx context.Context, caller Caller, tool string, args json.RawMessage, opts CallOptions) (*Result, error) {
	if _, err := s.tool(s.cfg.Now(), caller, "", tool); err != nil {
		return nil, err
	}
	sess, err := s.defaultSession(ctx, caller)
	if err != nil {
		return nil, err
	}
	return s.Call(ctx, caller, sess.ID, tool, args, opts)
}

// tool looks a tool up and checks that caller's token may call it; a refusal is
// measured and audited as a denied call of session id.
func (s *Service) tool(start time.Time, caller Caller, id, name string) (*Tool, error) {
	t, ok := s.catalog.Lookup(name)
	if !ok {
		return nil, &policy.Violation{Err: ErrInvalid, Rule: "tool", Detail: fmt.Sprintf("unknown tool %q", name)}
	}
	if err := caller.need(t.Scope, t.Name); err != nil {
		s.done(start, caller, id, t, nil, nil, err)
		return nil, err
	}
	return t, nil
}

// done measures and audits one call.
func (s *Service) done(start time.Time, caller Caller, session string, t *Tool, args json.RawMessage, res *Result, err error) {
	d := time.Since(start)
	outcome, decision, rule := classify(res, err)
	if rule != "" {
		s.obs.PolicyDenial(rule)
	}
	s.obs.ToolCall(t.Name, outcome, d)
	s.record(AuditRecord{Time: start.UTC(), Tenant: caller.Tenant, Subject: caller.Subject, Session: session,
		Tool: t.Name, Decision: decision, Outcome: outcome, Duration: d.Seconds(), Rule: rule, Args: auditArgs(args)})
}

// auditArgsMax is how much of a call's arguments its audit record keeps.
const auditArgsMax = 160

// auditRedacted are the argument names whose values the audit never keeps.
var auditRedacted = map[string]bool{"content": true, "contents": true, "patch": true, "env": true, "newText": true,
	"oldText": true, "newString": true, "oldString": true, "text": true, "edits": true, "input": true, "stdin": true, "replacement": true,
	"keys": true} // terminalSend's keys: what is typed is never kept

// auditRedactedFold reports whether k names a redacted argument in another case.
func auditRedactedFold(k string) bool {
	for r := range auditRedacted {
		if strings.EqualFold(r, k) {
			return true
		}
	}
	return false
}

// auditArgs is a call's arguments as one line of compact JSON (written data redacted
// to its size), cut short.
func auditArgs(args json.RawMessage) string {
	if len(args) == 0 {
		return ""
	}
	var obj map[string]json.RawMessage
	if mayRedact(args) && json.Unmarshal(args, &obj) == nil {
		// What a call writes or sets (file contents, patches, environment values) is
		// the caller's data: the audit keeps its size, not its bytes.
		for k, v := range obj {
			// By any case: JSON decoding matches field names regardless of it.
			if auditRedacted[k] || auditRedactedFold(k) {
				obj[k], _ = json.Marshal(fmt.Sprintf("(%d bytes)", len(v)))
			}
		}
		args, _ = json.Marshal(obj)
	}
	var b bytes.Buffer
	if json.Compact(&b, args) != nil {
		return "(malformed)"
	}
	out := b.String()
	if len(out) > auditArgsMax {
		cut := auditArgsMax
		for cut > 0 && !utf8.RuneStart(out[cut]) {
			cut--
		}
		out = out[:cut] + "…"
	}
	return out
}

// mayRedact reports whether args might name a redacted argument, so that the map
// above is built only for calls that may need it (a readFile's {"path": …} does not,
// and most calls' arguments are like it). It may say yes wrongly, never no: any
// escape (\u0063ontent is "content" to a decoder), any byte outside ASCII (the
// decoder folds the Kelvin sign to k), or a redacted name in any ASCII case anywhere
// in the text, key or value, is a yes.
func mayRedact(args []byte) bool {
	if len(args) > auditFastMax {
		return true
	}
	var buf [auditFastMax]byte
	low := buf[:len(args)]
	for i, c := range args {
		switch {
		case c == '\\' || c >= utf8.RuneSelf:
			return true
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		low[i] = c
	}
	for _, name := range auditRedactedLower {
		if bytes.Contains(low, name) {
			return true
		}
	}
	return false
}

// auditFastMax is the largest arguments mayRedact looks through; larger ones (writes,
// mostly) take the map.
const auditFastMax = 512

// auditRedactedLower are auditRedacted's names in lower case.
var auditRedactedLower = func() [][]byte {
	var out [][]byte
	for k := range auditRedacted {
		out = append(out, []byte(strings.ToLower(k)))
	}
	return out
}()

func (s *Service) run(ctx context.Context, t *Tool, sess *Session, caller Caller, args json.RawMessage, opts CallOptions) (*Result, error) {
	tp, _ := s.cfg.Tenants.Policy(caller.Tenant)
	if tp != nil && !toolsetEnabled(tp, t.Toolset) {
		return nil, &policy.Violation{Err: ErrPolicy, Rule: "toolsets", Detail: fmt.Sprintf("toolset %q is not enabled for this tenant", t.Toolset)}
	}
	if err := s.allow(ctx, caller.Tenant, tp); err != nil {
		return nil, err
	}
	c := &call{svc: s, sess: sess, caller: caller, agent: s.agentFor(sess.Sandbox), out: opts.OnOutput, tool: t.Name}
	eff, err := s.effectivePolicy(ctx, c, tp)
	if err != nil {
		return nil, err
	}
	g := eff.Guard()
	c.pol, c.guard = eff, &g
	if eff.NeedsConfirmation(t.Name) && !t.ConfirmsItself() {
		confirmed, rest, err := takeConfirmed(args)
		if err != nil {
			return nil, err
		}
		if err := eff.CheckConfirmed(t.Name, confirmed); err != nil {
			return nil, err
		}
		args = rest
	}
	if t.Scope == auth.ScopeToolsWrite {
		defer s.writing(sess.ID)()
	}
	v, err := t.Run(ctx, c, args)
	if err != nil {
		if f, ok := asFailure(err); ok {
			return &Result{Value: f, IsError: true}, nil
		}
		return nil, mapAgentError(err)
	}
	f, ok := v.(tool.Failed)
	res := &Result{Value: v, IsError: ok && f.Failed()}
	if n, ok := v.(interface{ Note() string }); ok && n.Note() != "" {
		c.notes = append([]string{n.Note()}, c.notes...)
	}
	res.Note = strings.Join(c.notes, "\n")
	return res, nil
}

// toolsetEnabled is contains(tp.EnabledToolsets(), toolset) without the copy.
func toolsetEnabled(tp *policy.Policy, toolset string) bool {
	if tp.Toolsets == nil {
		return slices.Contains(policy.AllToolsets, toolset)
	}
	return slices.Contains(tp.Toolsets, toolset)
}

// allow applies the tenant's rate limit.
func (s *Service) allow(ctx context.Context, tenant string, tp *policy.Policy) error {
	if tp == nil || tp.Rate == nil || tp.Rate.PerSecond <= 0 {
		return nil
	}
	limit := max(tp.Rate.Burst, int(tp.Rate.PerSecond+0.999))
	ok, err := s.cfg.Store.Allow(ctx, "tools:"+tenant, limit, time.Second)
	if err != nil {
		return fmt.Errorf("%w: rate limit: %v", ErrUnavailable, err)
	}
	if !ok {
		return fmt.Errorf("%w: tenant %s may make %d tool calls per second", ErrRateLimited, tenant, limit)
	}
	return nil
}

// asFailure turns execution outcomes into a tool result.
var asFailure = tool.AsFailure

// mapAgentError turns the agent's refusals into the domain's errors.
func mapAgentError(err error) error {
	var we *agent.WireError
	if !errors.As(err, &we) {
		if f, ok := mapFault(err); ok {
			return f
		}
		switch {
		case errors.Is(err, agent.ErrVersion): // the same agent answers every retry
			return fmt.Errorf("%w: %v", ErrIncompatible, err)
		case errors.Is(err, agent.ErrUnavailable):
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return err
	}
	switch we.Code {
	case agent.CodeTraversal:
		return &policy.Violation{Err: ErrTraversal, Path: we.Path, Rule: "workspace", Detail: we.Message}
	case agent.CodeDenied:
		return &policy.Violation{Err: ErrPolicy, Path: we.Path, Rule: we.Rule, Detail: we.Message}
	case agent.CodeTooLarge:
		return &policy.Violation{Err: ErrTooLarge, Path: we.Path, Rule: cmp.Or(we.Rule, "maxFileSize"), Detail: we.Message}
	case agent.CodeInvalid:
		return &policy.Violation{Err: ErrInvalid, Path: we.Path, Detail: we.Message, Data: we.Data}
	case agent.CodeCommand:
		return &policy.Violation{Err: ErrCommand, Path: we.Path, Rule: "allowedCommands", Detail: we.Message}
	case agent.CodeCanceled:
		return context.Canceled
	case agent.CodeNotEnforced:
		return &policy.Violation{Err: ErrCommand, Rule: "requireLandlock", Detail: we.Message}
	}
	return fmt.Errorf("agent: %w", err)
}

// classify names a call's outcome for metrics and audit.
func classify(res *Result, err error) (outcome, decision, rule string) {
	switch {
	case err == nil && res != nil && res.IsError:
		return "error", "allow", ""
	case err == nil:
		return "ok", "allow", ""
	}
	return classifyErr(err)
}

// classifyErr is classify of a call that failed (apart, so that a call that did not
// allocates nothing for errors.As).
func classifyErr(err error) (outcome, decision, rule string) {
	var v *policy.Violation
	switch {
	case AsScopeError(err) != nil:
		return "denied", "deny", "scope"
	case errors.As(err, &v) && !errors.Is(err, ErrInvalid):
		r := v.Rule
		if r == "" {
			r = "policy"
		}
		return "denied", "deny", ruleLabel(r)
	case errors.Is(err, ErrInvalid):
		return "invalid", "allow", ""
	case errors.Is(err, ErrRateLimited):
		return "rate_limited", "deny", ""
	case errors.Is(err, ErrNotFound):
		return "not_found", "deny", ""
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled", "allow", ""
	case errors.Is(err, ErrUnavailable):
		return "unavailable", "allow", ""
	}
	return "internal", "allow", ""
}

// ruleLabel keeps the metric label bounded: the rule's field name, never its pattern.
func ruleLabel(rule string) string {
	for i, c := range rule {
		if c == ' ' {
			return rule[:i]
		}
	}
	return rule
}

func (s *Service) record(r AuditRecord) {
	s.auditMu.RLock()
	defer s.auditMu.RUnlock()
	if s.auditClosed {
		return
	}
	select {
	case s.audit <- r:
	default:
		s.log.Warn("audit queue full, record dropped", "tool", r.Tool, "session", r.Session)
	}
}

func invalidf(field, format string, a ...any) error {
	return &policy.Violation{Err: ErrInvalid, Rule: field, Detail: fmt.Sprintf(format, a...)}
}

// Outcomes are the values of a tool call's outcome label (metrics, audit).
var Outcomes = []string{"ok", "error", "denied", "invalid", "rate_limited", "not_found", "canceled", "unavailable", "internal"}

// DenialRules are the policy rules a denial is counted under.
var DenialRules = []string{"allowedPaths", "deniedPaths", "protected", "maxFileSize", "maxEditSize", "allowedCommands",
	"envAllowlist", "envDenied", "confirmationRequired", "toolsets", "images", "workspace", "workspacePolicy", "requireLandlock", "scope", agent.RuleFrameSize, "gitOutput"}

// takeConfirmed reads and removes a top-level "confirmed": true, which any tool listed in
// confirmationRequired accepts.
func takeConfirmed(raw json.RawMessage) (bool, json.RawMessage, error) {
	var m map[string]json.RawMessage
	if len(raw) == 0 || string(raw) == "null" {
		return false, raw, nil
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return false, nil, invalidf("arguments", "arguments must be a JSON object: %v", err)
	}
	c, ok := m["confirmed"]
	if !ok {
		return false, raw, nil
	}
	var confirmed bool
	if err := json.Unmarshal(c, &confirmed); err != nil {
		return false, nil, invalidf("confirmed", "confirmed must be true or false")
	}
	delete(m, "confirmed")
	rest, err := json.Marshal(m)
	return confirmed, rest, err
}

// The tool.Env of a call.

func (c *call) SessionID() string { return c.sess.ID }
func (c *call) Caller() tool.Caller {
	return tool.Caller{Tenant: c.caller.Tenant, Subject: c.caller.Subject, Scopes: c.caller.Scopes}
}
func (c *call) Tool() string              { return c.tool }
func (c *call) Agent() *agent.Client      { return c.agent }
func (c *call) Policy() *policy.Effective { return c.pol }
func (c *call) Guard() *guard.Guard       { return c.guard }
func (c *call) Output() func(stream string, data []byte) {
	if c.out == nil {
		return nil
	}
	return c.out
}
func (c *call) PolicyChanged()  { c.svc.policyChanged(c.sess.ID) }
func (c *call) ExecUnenforced() { c.svc.obs.ExecUnenforced() }
func (c *call) TerminalsRunning(n int) {
	c.svc.noteTerminals(c.sess.Tenant, c.sess.ID, n)
}
func (c *call) Note(remark string) {
	if remark != "" && !slices.Contains(c.notes, remark) {
		c.notes = append(c.notes, remark)
	}
}

func (c *call) State() tool.State {
	return &state{store: c.svc.cfg.Store, tenant: c.sess.Tenant, id: c.sess.ID}
}

var _ tool.Env = (*call)(nil)

// state is a session's tool.State in the session store.
type state struct {
	store      Store
	tenant, id string
}

func (s *state) Get(ctx context.Context, key string, v any) (bool, error) {
	b, err := s.store.GetState(ctx, s.tenant, s.id, key)
	if err != nil {
		return false, fmt.Errorf("session state %s: %w", key, err)
	}
	if b == nil {
		return false, nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("session state %s: %w", key, err)
	}
	return true, nil
}

func (s *state) Put(ctx context.Context, key string, v any) error {
	var b []byte
	if v != nil {
		var err error
		if b, err = json.Marshal(v); err != nil {
			return fmt.Errorf("session state %s: %w", key, err)
		}
	}
	if err := s.store.PutState(ctx, s.tenant, s.id, key, b); err != nil {
		return fmt.Errorf("session state %s: %w", key, err)
	}
	return nil
}
