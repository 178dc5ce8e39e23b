// Package tool is the small contract between cws's call pipeline (workspace.Service)
// and a toolset (workspace/toolset/core, …/lsp, …/vscode). A toolset is a package that
// sees only this one: it builds Tools with New, and each Tool's Run gets an Env, which is
// everything the service lends one call: the session, the caller, the agent, the
// effective policy and its guard, and an output stream.
//
// The pipeline decides what comes before a tool runs (the token's scope, the tenant's
// toolsets and rate, the policy, confirmation) and what comes after (metrics, audit,
// the error codes); a tool's body only does its work.
package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"github.com/cwsdev/cws/workspace/policy"
)

// Annotations are the MCP tool hints.
type Annotations struct {
	ReadOnly    bool `json:"readOnlyHint"`
	Destructive bool `json:"destructiveHint"`
	Idempotent  bool `json:"idempotentHint"`
	OpenWorld   bool `json:"openWorldHint"`
}

// Kind is what a tool does: its MCP annotations and the token scope a call needs both
// follow from this one choice in its entry.
type Kind struct {
	Annotations Annotations
	Scope       string
}

// The kinds of tools.
var (
	Read        = Kind{Annotations{ReadOnly: true, Idempotent: true}, auth.ScopeToolsRead}
	Write       = Kind{Annotations{Idempotent: true}, auth.ScopeToolsWrite}
	Destructive = Kind{Annotations{Destructive: true}, auth.ScopeToolsWrite}
	Runs        = Kind{Annotations{Destructive: true, OpenWorld: true}, auth.ScopeToolsExec}
	// Watches reads what commands printed (their output is theirs, so tools:read alone
	// must not see it); Stops ends them.
	Watches = Kind{Annotations{ReadOnly: true, Idempotent: true}, auth.ScopeToolsExec}
	Stops   = Kind{Annotations{Destructive: true}, auth.ScopeToolsExec}
)

// Tool is one catalogue entry: MCP and REST both serve from it.
type Tool struct {
	Name         string
	Title        string
	Description  string
	Toolset      string // core, vscode, lsp
	Annotations  Annotations
	Scope        string // the token scope a call needs (auth.Scope*)
	InputSchema  *jsonschema.Schema
	OutputSchema *jsonschema.Schema
	// Streams is true for tools that report output while they run (progress).
	Streams bool
	// Run decodes the raw arguments and runs the tool. Its value is the result; an error
	// is a refusal (policy, invalid arguments) or an execution outcome (Fail, an agent
	// not-found), which the pipeline tells apart.
	Run func(ctx context.Context, env Env, raw json.RawMessage) (any, error)
}

// ConfirmsItself reports whether the tool has the seed's options.confirmed and checks
// confirmation in its body (runCommand, startProcess).
func (t *Tool) ConfirmsItself() bool {
	o := t.InputSchema.Properties["options"]
	return o != nil && o.Properties["confirmed"] != nil
}

// Streaming marks t as one that reports output while it runs, and returns it.
func Streaming(t *Tool) *Tool {
	t.Streams = true
	return t
}

// Caller is who is calling: the tenant and subject of a verified token, and its scopes.
type Caller struct {
	Tenant  string
	Subject string
	Scopes  []string
}

// Env is what one call of a tool gets from the service.
type Env interface {
	// SessionID is the session the call runs in.
	SessionID() string
	// Caller is who is calling.
	Caller() Caller
	// Tool is the called tool's name (confirmation is by tool name).
	Tool() string
	// Agent is the session's agent client.
	Agent() *agent.Client
	// Policy is the effective policy: the tenant's, narrowed by the workspace's file.
	Policy() *policy.Effective
	// Guard is the policy's path rules, for the agent to re-check resolved paths.
	Guard() *guard.Guard
	// Output streams a running tool's output (stream is "stdout" or "stderr"); nil when
	// the caller does not follow progress.
	Output() func(stream string, data []byte)
	// PolicyChanged tells the service the workspace's policy file was written.
	PolicyChanged()
	// ExecUnenforced counts a command that ran without the Landlock launcher enforcing
	// its allowlist (the sandbox has no Landlock).
	ExecUnenforced()
	// TerminalsRunning tells the service how many terminals the session runs now, as
	// the agent just said (the terminals-open metric).
	TerminalsRunning(n int)
	// State is the session's small key/value state in the session store (editor state,
	// breakpoints): it survives a cws restart on Redis and every replica sees it.
	State() State
	// Note adds a remark beside the call's result: that it was cut to a size limit, and
	// what was left out, where the result's shape (an array) has no room to say so.
	Note(remark string)
}

// State is a session's per-toolset state, JSON values by key.
type State interface {
	// Get decodes key's value into v and reports whether it was set.
	Get(ctx context.Context, key string, v any) (bool, error)
	// Put stores v as key's value (JSON); nil deletes it.
	Put(ctx context.Context, key string, v any) error
}

// Defaults maps dotted property paths ("options.atomic") to default values shown in the
// schema.
type Defaults map[string]any

// New builds a typed tool: A is decoded strictly from the call's arguments, R is the
// result. Their JSON Schemas are inferred from the Go types and their `jsonschema` tags.
func New[A, R any](name, toolset, title, desc string, k Kind, dflt Defaults, fn func(ctx context.Context, env Env, a *A) (*R, error)) *Tool {
	opts := &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[time.Time](): {Type: "string", Format: "date-time"},
	}}
	in, err := jsonschema.For[A](opts)
	if err != nil {
		panic(fmt.Sprintf("schema for %s args: %v", name, err))
	}
	out, err := jsonschema.For[R](opts)
	if err != nil {
		panic(fmt.Sprintf("schema for %s result: %v", name, err))
	}
	for path, v := range dflt {
		setDefault(in, path, v)
	}
	required := in.Required
	return &Tool{
		Name: name, Title: title, Description: desc, Toolset: toolset, Annotations: k.Annotations, Scope: k.Scope,
		InputSchema: in, OutputSchema: out,
		Run: func(ctx context.Context, env Env, raw json.RawMessage) (any, error) {
			var a A
			if err := DecodeArgs(raw, required, &a); err != nil {
				return nil, err
			}
			return fn(ctx, env, &a)
		},
	}
}

func setDefault(s *jsonschema.Schema, path string, v any) {
	head, rest, nested := strings.Cut(path, ".")
	p := s.Properties[head]
	if p == nil {
		panic("no schema property " + head)
	}
	if nested {
		setDefault(p, rest, v)
		return
	}
	b, _ := json.Marshal(v)
	p.Default = b
}

// DecodeArgs decodes a call's arguments strictly: unknown fields, missing required
// fields and wrong types are invalid params naming the field.
func DecodeArgs(raw json.RawMessage, required []string, v any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return Invalidf("arguments", "arguments must be a JSON object: %v", err)
	}
	var missing []string
	for _, r := range required {
		if b, ok := top[r]; !ok || string(b) == "null" {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return Invalidf(missing[0], "missing required argument %s", strings.Join(missing, ", "))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return Invalidf(te.Field, "argument %s must be %s, not %s", te.Field, te.Type, te.Value)
		}
		msg := err.Error()
		if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
			f = strings.Trim(f, `"`)
			return Invalidf(f, "unknown argument %q", f)
		}
		return Invalidf("arguments", "bad arguments: %v", err)
	}
	return nil
}

// Invalidf is an invalid-params refusal (-32602) naming field.
func Invalidf(field, format string, a ...any) error {
	return &policy.Violation{Err: policy.ErrInvalid, Rule: field, Detail: fmt.Sprintf(format, a...)}
}

// Failure is the value of an error result (isError) that has no typed result of its own.
type Failure struct {
	Error FailureDetail `json:"error"`
}

// FailureDetail says what failed and where.
type FailureDetail struct {
	Code    string `json:"code"` // not_found, exists, is_dir, not_dir, not_empty, unsupported, lost, failed, git_failed…
	Message string `json:"message"`
	Path    string `json:"path,omitempty"`
}

// Fail is an execution outcome a tool reports as an error result (git refused, a patch
// does not apply), not a protocol error.
type Fail FailureDetail

func (f *Fail) Error() string { return f.Message }

// Failed is implemented by results that can be failures themselves (a non-zero exit):
// the pipeline marks them isError.
type Failed interface{ Failed() bool }

// AsFailure turns execution outcomes into a tool result: a Fail, or an agent's
// not-found, exists, is-a-directory, not-a-directory, not-empty, unsupported, or lost
// (a background process lost with the agent).
func AsFailure(err error) (Failure, bool) {
	var f *Fail
	if errors.As(err, &f) {
		return Failure{Error: FailureDetail(*f)}, true
	}
	var we *agent.WireError
	if !errors.As(err, &we) {
		return Failure{}, false
	}
	switch we.Code {
	case agent.CodeNotFound, agent.CodeExists, agent.CodeIsDir, agent.CodeNotDir, agent.CodeNotEmpty, agent.CodeUnsupported, agent.CodeLost:
		return Failure{Error: FailureDetail{Code: we.Code, Message: we.Message, Path: we.Path}}, true
	}
	return Failure{}, false
}
