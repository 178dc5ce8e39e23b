package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/policy"
)

func TestErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int64
	}{
		{&policy.Violation{Err: workspace.ErrInvalid, Rule: "query"}, -32602},
		{&policy.Violation{Err: workspace.ErrTraversal, Path: "../x"}, -32001},
		{&policy.Violation{Err: workspace.ErrPolicy, Path: ".env", Rule: `deniedPaths ".env"`}, -32002},
		{&policy.Violation{Err: workspace.ErrTooLarge, Rule: "maxFileSize"}, -32003},
		{&policy.Violation{Err: workspace.ErrCommand, Rule: "allowedCommands"}, -32004},
		{&policy.Violation{Err: workspace.ErrConfirm, Rule: "confirmationRequired"}, -32005},
		{fmt.Errorf("wrapped: %w", workspace.ErrNotFound), -32602},
		{workspace.ErrQuota, -32002},
		{workspace.ErrRateLimited, -32002},
		{fmt.Errorf("%w: docker down", workspace.ErrUnavailable), -32603},
		{context.Canceled, -32603},
		{errors.New("disk on fire at /var/lib/secret"), -32603},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			e := rpcError(tc.err)
			if e.Code != tc.code {
				t.Fatalf("code %d, want %d", e.Code, tc.code)
			}
			if e.Code == CodeInternal && e.Message != "internal error" && !errors.Is(tc.err, workspace.ErrUnavailable) && !errors.Is(tc.err, context.Canceled) {
				t.Fatalf("internal error leaks its cause: %q", e.Message)
			}
			var v *policy.Violation
			if errors.As(tc.err, &v) {
				var d ErrorData
				if err := json.Unmarshal(e.Data, &d); err != nil || d.Path != v.Path || d.Rule != v.Rule {
					t.Fatalf("data %s does not name path %q and rule %q", e.Data, v.Path, v.Rule)
				}
			}
		})
	}
}

// TestOnlyRetryableSaysRetry walks the MCP error mapping: "retry" in the message, or
// data that says retryable or when to retry, only for an error a retry of the same
// call may fix (workspace.Retryable).
func TestOnlyRetryableSaysRetry(t *testing.T) {
	var errs []error
	for _, k := range workspace.Kinds {
		errs = append(errs, fmt.Errorf("%w: the cause", k), &policy.Violation{Err: k, Rule: "rule", Detail: "what was wrong"})
	}
	errs = append(errs, &workspace.Interrupted{Started: true}, &workspace.Interrupted{},
		&policy.Violation{Err: workspace.ErrTooLarge, Rule: agent.RuleFrameSize, Detail: agent.FrameTooLarge(agent.MaxHeader+1, 0).Message},
		context.Canceled, context.DeadlineExceeded, errors.New("disk on fire"))
	for _, err := range errs {
		t.Run(err.Error(), func(t *testing.T) {
			e := rpcError(err)
			var d ErrorData
			if len(e.Data) > 0 {
				if err := json.Unmarshal(e.Data, &d); err != nil {
					t.Fatal(err)
				}
			}
			says := strings.Contains(strings.ToLower(e.Message), "retry") || d.Retryable || d.RetryAfter > 0
			if want := workspace.Retryable(err); says != want {
				t.Errorf("%d %q %s: says retry = %v, want %v", e.Code, e.Message, e.Data, says, want)
			}
		})
	}
}

// TestTooLargeAnswer: an answer over the frame limit is -32003 naming the limit.
func TestTooLargeAnswer(t *testing.T) {
	e := rpcError(&policy.Violation{Err: workspace.ErrTooLarge, Rule: agent.RuleFrameSize,
		Detail: "the answer is 1769353 bytes, over the 1048576 bytes one answer from the workspace may hold"})
	if e.Code != CodeTooLarge || !strings.Contains(e.Message, "1048576") {
		t.Errorf("%d %q, want %d naming the limit", e.Code, e.Message, CodeTooLarge)
	}
}
