package workspace

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"github.com/cwsdev/cws/version"
	"github.com/cwsdev/cws/workspace/policy"
)

func versionString() string { return version.Version }

// Result is a tool call's outcome. IsError marks execution failures (file not found,
// non-zero exit, timeout): they are results for the agent to read, not protocol errors.
type Result struct {
	Value   any
	IsError bool
}

// Failure is the Value of an IsError result that has no typed result of its own.
type Failure struct {
	Error FailureDetail `json:"error"`
}

// FailureDetail says what failed and where.
type FailureDetail struct {
	Code    string `json:"code"` // not_found, exists, is_dir, not_dir, not_empty, failed
	Message string `json:"message"`
	Path    string `json:"path,omitempty"`
}

// OutputFunc receives a running tool's output as it is produced (stream is "stdout" or
// "stderr"). It must not block for long.
type OutputFunc func(stream string, data []byte)

// CallOptions are per-call extras from the protocol layer.
type CallOptions struct {
	OnOutput OutputFunc
}

// call is what a tool's body gets: the session's agent, the effective policy and the caller.
type call struct {
	svc    *Service
	sess   *Session
	caller Caller
	agent  *agent.Client
	pol    *policy.Effective
	guard  *guard.Guard
	out    OutputFunc
	tool   string
}

// Call runs one tool for caller in session id. Unknown tools and another tenant's
// session are errors; the policy is checked before anything reaches the sandbox.
func (s *Service) Call(ctx context.Context, caller Caller, id, tool string, args json.RawMessage, opts CallOptions) (*Result, error) {
	start := s.cfg.Now()
	t, ok := s.catalog.Lookup(tool)
	if !ok {
		return nil, &policy.Violation{Err: ErrInvalid, Rule: "tool", Detail: fmt.Sprintf("unknown tool %q", tool)}
	}
	sess, err := s.session(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	res, err := s.run(ctx, t, sess, caller, args, opts)
	if err == nil {
		s.renew(ctx, sess)
	} else {
		s.noteLost(ctx, sess, err)
	}
	d := time.Since(start)
	outcome, decision, rule := classify(res, err)
	if rule != "" {
		s.obs.PolicyDenial(rule)
	}
	s.obs.ToolCall(t.Name, outcome, d)
	s.record(AuditRecord{Time: start.UTC(), Tenant: caller.Tenant, Subject: caller.Subject, Session: sess.ID,
		Tool: t.Name, Decision: decision, Outcome: outcome, Duration: d.Seconds(), Rule: rule})
	return res, err
}

func (s *Service) run(ctx context.Context, t *Tool, sess *Session, caller Caller, args json.RawMessage, opts CallOptions) (*Result, error) {
	tp, _ := s.cfg.Tenants.Policy(caller.Tenant)
	if tp != nil && !contains(tp.EnabledToolsets(), t.Toolset) {
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
	if eff.NeedsConfirmation(t.Name) && !t.confirmsItself() {
		confirmed, rest, err := takeConfirmed(args)
		if err != nil {
			return nil, err
		}
		if err := eff.CheckConfirmed(t.Name, confirmed); err != nil {
			return nil, err
		}
		args = rest
	}
	v, err := t.run(ctx, c, args)
	if err != nil {
		if f, ok := asFailure(err); ok {
			return &Result{Value: f, IsError: true}, nil
		}
		return nil, mapAgentError(err)
	}
	f, ok := v.(interface{ failed() bool })
	return &Result{Value: v, IsError: ok && f.failed()}, nil
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

// failure is an execution outcome a tool reports as an error result (git refused,
// a patch does not apply).
type failure FailureDetail

func (f *failure) Error() string { return f.Message }

// asFailure turns execution outcomes into a tool result.
func asFailure(err error) (Failure, bool) {
	var f *failure
	if errors.As(err, &f) {
		return Failure{Error: FailureDetail(*f)}, true
	}
	var we *agent.WireError
	if !errors.As(err, &we) {
		return Failure{}, false
	}
	switch we.Code {
	case agent.CodeNotFound, agent.CodeExists, agent.CodeIsDir, agent.CodeNotDir, agent.CodeNotEmpty:
		return Failure{Error: FailureDetail{Code: we.Code, Message: we.Message, Path: we.Path}}, true
	}
	return Failure{}, false
}

// mapAgentError turns the agent's refusals into the domain's errors.
func mapAgentError(err error) error {
	var we *agent.WireError
	if !errors.As(err, &we) {
		if f, ok := mapFault(err); ok {
			return f
		}
		if errors.Is(err, agent.ErrUnavailable) || errors.Is(err, agent.ErrVersion) {
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
		return &policy.Violation{Err: ErrInvalid, Path: we.Path, Detail: we.Message}
	case agent.CodeCanceled:
		return context.Canceled
	}
	return fmt.Errorf("agent: %w", err)
}

// classify names a call's outcome for metrics and audit.
func classify(res *Result, err error) (outcome, decision, rule string) {
	var v *policy.Violation
	switch {
	case err == nil && res != nil && res.IsError:
		return "error", "allow", ""
	case err == nil:
		return "ok", "allow", ""
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
	"envAllowlist", "envDenied", "confirmationRequired", "toolsets", "images", "workspace", "workspacePolicy"}

// confirmsItself reports whether the tool has the seed's options.confirmed and checks
// confirmation in its body (runCommand, startProcess).
func (t *Tool) confirmsItself() bool {
	o := t.InputSchema.Properties["options"]
	return o != nil && o.Properties["confirmed"] != nil
}

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
