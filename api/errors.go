package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/cwsdev/cws/api/mcp"
	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/gin-gonic/gin"
)

// ErrorBody is every error response: {"error":{"code","message"}}, plus what a policy
// refusal names.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail describes one error.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	RPCCode int64  `json:"rpcCode,omitempty"` // the seed's JSON-RPC code, for tool errors
	Path    string `json:"path,omitempty"`
	Rule    string `json:"rule,omitempty"`
	Scope   string `json:"scope,omitempty"` // the token scope the request needs (403 forbidden)
}

// statuses maps domain errors to HTTP: the one place this happens for REST. Order
// matters: the first match wins.
var statuses = []struct {
	err    error
	status int
	code   string
}{
	{auth.ErrInvalidToken, http.StatusUnauthorized, "unauthorized"},
	{workspace.ErrNotFound, http.StatusNotFound, "not_found"},
	{workspace.ErrSessionLost, http.StatusGone, "session_lost"},
	{workspace.ErrIncompatible, http.StatusConflict, "incompatible"},
	{workspace.ErrNotConfigured, http.StatusNotImplemented, "not_configured"},
	{workspace.ErrNoListener, http.StatusBadGateway, "nothing_listening"},
	{workspace.ErrTraversal, http.StatusBadRequest, "path_traversal"},
	{workspace.ErrCommand, http.StatusForbidden, "command_not_allowed"},
	{workspace.ErrConfirm, http.StatusPreconditionRequired, "confirmation_required"},
	{workspace.ErrTooLarge, http.StatusRequestEntityTooLarge, "too_large"},
	{workspace.ErrPolicy, http.StatusForbidden, "policy_violation"},
	{workspace.ErrForbidden, http.StatusForbidden, "forbidden"},
	{workspace.ErrInvalid, http.StatusBadRequest, "invalid_params"},
	{workspace.ErrConflict, http.StatusConflict, "conflict"},
	{workspace.ErrQuota, http.StatusTooManyRequests, "quota_exceeded"},
	{workspace.ErrRateLimited, http.StatusTooManyRequests, "rate_limited"},
	{workspace.ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
	{context.DeadlineExceeded, http.StatusGatewayTimeout, "timeout"},
}

// statusOf is err's HTTP status and error code, from the table.
func statusOf(err error) (int, string) {
	for _, s := range statuses {
		if errors.Is(err, s.err) {
			return s.status, s.code
		}
	}
	return http.StatusInternalServerError, "internal"
}

// fail writes err as the error body. 5xx never carry the cause: it is logged.
func fail(c *gin.Context, log *slog.Logger, err error) {
	status, body := errorResponse(c, log, err)
	c.AbortWithStatusJSON(status, body)
}

// errorBody is err as an error body (one item of a response that lists several).
func errorBody(err error) ErrorBody {
	_, body := errorResponse(nil, slog.New(slog.DiscardHandler), err)
	return body
}

// errorResponse is err's status and body; c (nil for a body inside another response)
// gets the Retry-After header of a retryable error.
func errorResponse(c *gin.Context, log *slog.Logger, err error) (int, ErrorBody) {
	status, code := statusOf(err)
	d := ErrorDetail{Code: code, Message: err.Error()}
	if errors.Is(err, workspace.ErrNotFound) {
		d.Message = "not found" // the same bytes for a missing id and another tenant's
	}
	var v *policy.Violation
	if errors.As(err, &v) { // a tool-level refusal: the same seed code MCP sends
		d.Path, d.Rule, d.RPCCode = v.Path, v.Rule, mcp.Code(err)
	}
	if se := workspace.AsScopeError(err); se != nil {
		d.Rule, d.Scope, d.RPCCode = "scope", se.Scope, mcp.Code(err)
	}
	if status >= 500 && status != http.StatusNotImplemented {
		route := ""
		if c != nil {
			route = c.FullPath()
		}
		d.Message = http.StatusText(status)
		if errors.Is(err, workspace.ErrNoListener) { // what to fix is in the workspace: say it
			d.Message = err.Error()
			log.Debug("request failed", "route", route, "status", status, "err", err) // the app's state, not cws's fault
		} else {
			log.Error("request failed", "route", route, "status", status, "err", err)
		}
		if status == http.StatusServiceUnavailable { // workspace.Retryable: only it says retry
			d.Message = "temporarily unavailable, retry shortly"
			if errors.Is(err, workspace.ErrAgentUnresponsive) { // says only that: no cause leaks
				d.Message = workspace.ErrAgentUnresponsive.Error()
			}
			if c != nil {
				c.Header("Retry-After", strconv.Itoa(mcp.RetryAfterSeconds))
			}
			var in *workspace.Interrupted
			if errors.As(err, &in) { // says only whether the command ran: no cause leaks
				d.Message = in.Error()
			}
		}
	}
	return status, ErrorBody{Error: d}
}
