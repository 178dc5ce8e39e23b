package mcp

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// The seed's JSON-RPC error codes (seeds/coding-environment-tools.md).
const (
	CodeInvalidParams      = -32602
	CodeInternal           = -32603
	CodePathTraversal      = -32001
	CodePolicyViolation    = -32002
	CodeTooLarge           = -32003
	CodeCommandNotAllowed  = -32004
	CodeConfirmationNeeded = -32005
)

// codes maps each domain error to its code: the one place this happens for MCP.
var codes = []struct {
	err  error
	code int64
	msg  string
}{
	{workspace.ErrTraversal, CodePathTraversal, "path traversal detected"},
	{workspace.ErrCommand, CodeCommandNotAllowed, "command not allowed"},
	{workspace.ErrConfirm, CodeConfirmationNeeded, "confirmation required"},
	{workspace.ErrTooLarge, CodeTooLarge, "too large"},
	{workspace.ErrPolicy, CodePolicyViolation, "policy violation"},
	{workspace.ErrQuota, CodePolicyViolation, "session quota exceeded"},
	{workspace.ErrRateLimited, CodePolicyViolation, "rate limit exceeded"},
	{workspace.ErrForbidden, CodePolicyViolation, "forbidden"},
	{workspace.ErrInvalid, CodeInvalidParams, "invalid params"},
	{workspace.ErrNotFound, CodeInvalidParams, "session not found"},
	{workspace.ErrSessionLost, CodePathTraversal, "session lost: its sandbox was removed, and its files with it; start a new session"},
	{workspace.ErrIncompatible, CodeInternal, "the session's sandbox runs an agent this server cannot use; start a new session"},
	{workspace.ErrNotConfigured, CodeInternal, "not configured on this server"},
	{workspace.ErrNoListener, CodeInternal, "nothing is listening on the port"},
	{workspace.ErrAgentUnresponsive, CodeInternal, "the workspace agent is not responding; cws is restarting it, retry shortly"},
	{workspace.ErrUnavailable, CodeInternal, "workspace temporarily unavailable, retry"},
	{context.Canceled, CodeInternal, "canceled"},
	{context.DeadlineExceeded, CodeInternal, "deadline exceeded"},
}

// ErrorData is the error's data: what was refused and by which rule.
type ErrorData struct {
	Path   string `json:"path,omitempty"`
	Rule   string `json:"rule,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Reason names a fault the caller can act on: "session_lost" and "incompatible"
	// (start a new session), "unavailable" (retry after RetryAfter seconds).
	Reason     string `json:"reason,omitempty"`
	Retryable  bool   `json:"retryable,omitempty"`
	RetryAfter int    `json:"retryAfter,omitempty"` // seconds
	// Started, for reason "interrupted": whether the command had started.
	Started *bool  `json:"started,omitempty"`
	Scope   string `json:"scope,omitempty"` // the token scope the call needs (rule "scope")
	// Valid is what would have been accepted, e.g. a position's valid range
	// ({"line":{"min":1,"max":N},"character":{"min":1,"max":M}}).
	Valid json.RawMessage `json:"valid,omitempty"`
}

// RetryAfterSeconds is what a retryable error tells the caller to wait.
const RetryAfterSeconds = 1

// rpcError turns an error into the JSON-RPC error the client sees. Internal causes
// are logged by the caller's middleware, never sent.
func rpcError(err error) *jsonrpc.Error {
	var in *workspace.Interrupted
	if errors.As(err, &in) { // a command whose stream broke: say whether it ran
		e := &jsonrpc.Error{Code: CodeInternal, Message: in.Error()}
		e.Data, _ = json.Marshal(ErrorData{Reason: "interrupted", Retryable: true, RetryAfter: RetryAfterSeconds, Started: &in.Started})
		return e
	}
	for _, c := range codes {
		if !errors.Is(err, c.err) {
			continue
		}
		e := &jsonrpc.Error{Code: c.code, Message: c.msg}
		var v *policy.Violation
		if errors.As(err, &v) {
			e.Message = v.Error()
			e.Data, _ = json.Marshal(ErrorData{Path: v.Path, Rule: v.Rule, Detail: v.Detail, Valid: v.Data})
		} else if se := workspace.AsScopeError(err); se != nil {
			e.Message = se.Error()
			e.Data, _ = json.Marshal(ErrorData{Rule: "scope", Scope: se.Scope})
		} else if c.code != CodeInternal && c.err != workspace.ErrNotFound && c.err != workspace.ErrSessionLost {
			e.Message = err.Error() // a missing session keeps the fixed message: ids are not echoed
		}
		switch c.err {
		case workspace.ErrSessionLost:
			e.Data, _ = json.Marshal(ErrorData{Reason: "session_lost"})
		case workspace.ErrIncompatible:
			e.Data, _ = json.Marshal(ErrorData{Reason: "incompatible"})
		case workspace.ErrUnavailable, workspace.ErrAgentUnresponsive:
			e.Data, _ = json.Marshal(ErrorData{Reason: "unavailable", Retryable: workspace.Retryable(err), RetryAfter: RetryAfterSeconds})
		}
		return e
	}
	return &jsonrpc.Error{Code: CodeInternal, Message: "internal error"}
}

// Code returns the JSON-RPC code err maps to (for REST bodies and tests).
func Code(err error) int64 { return rpcError(err).Code }
