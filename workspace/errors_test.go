package workspace_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/policy"
)

// TestAgentErrorsRetryable walks what the agent client can fail with and checks the
// domain error each becomes: only what may succeed when made again is retryable. A
// request or an answer over the frame limit is ErrTooLarge naming the limit, and an
// agent of another protocol is ErrIncompatible, whatever a retry would meet.
func TestAgentErrorsRetryable(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		kind      error
		retryable bool
		names     string // the message names this
	}{
		{"request over the frame limit", fmt.Errorf("write: %w", agent.FrameTooLarge(200, agent.MaxBody+1)), workspace.ErrTooLarge, false, "8388608"},
		{"answer over the frame limit", &agent.WireError{Code: agent.CodeTooLarge, Rule: agent.RuleFrameSize,
			Message: "the answer is 1769353 bytes, over the 1048576 bytes one answer from the workspace may hold"}, workspace.ErrTooLarge, false, "1048576"},
		{"file over the policy", agent.Errorf(agent.CodeTooLarge, "big.bin", "file is 11 MiB"), workspace.ErrTooLarge, false, "big.bin"},
		{"agent of another protocol", fmt.Errorf("%w: the agent speaks protocol 1", agent.ErrVersion), workspace.ErrIncompatible, false, "protocol"},
		{"agent unreachable", fmt.Errorf("%w: dial: connection refused", agent.ErrUnavailable), workspace.ErrUnavailable, true, ""},
		{"command interrupted", &agent.InterruptedError{Op: agent.OpExec, Started: true, Err: errors.New("EOF")}, workspace.ErrUnavailable, true, ""},
		{"invalid", agent.Errorf(agent.CodeInvalid, "", "bad glob"), workspace.ErrInvalid, false, "bad glob"},
		{"denied", agent.Errorf(agent.CodeDenied, ".env", "denied"), workspace.ErrPolicy, false, ".env"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := workspace.MapAgentError(tc.err)
			if !errors.Is(err, tc.kind) {
				t.Fatalf("%v became %v, want %v", tc.err, err, tc.kind)
			}
			if got := workspace.Retryable(err); got != tc.retryable {
				t.Errorf("Retryable(%v) = %v, want %v", err, got, tc.retryable)
			}
			if !strings.Contains(err.Error(), tc.names) {
				t.Errorf("%q does not name %q", err, tc.names)
			}
			var v *policy.Violation
			if errors.Is(err, workspace.ErrTooLarge) && strings.Contains(tc.name, "frame") && (!errors.As(err, &v) || v.Rule != agent.RuleFrameSize) {
				t.Errorf("%v: want rule %s", err, agent.RuleFrameSize)
			}
		})
	}
}

// TestKindsRetryable: of the domain's kinds only ErrUnavailable is retryable.
func TestKindsRetryable(t *testing.T) {
	for _, k := range workspace.Kinds {
		if got, want := workspace.Retryable(fmt.Errorf("x: %w", k)), k == workspace.ErrUnavailable; got != want {
			t.Errorf("Retryable(%v) = %v, want %v", k, got, want)
		}
	}
}
