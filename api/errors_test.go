package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/gin-gonic/gin"
)

// errorsOfEveryKind are errors of each domain kind as the Service returns them (a
// wrapped sentinel, a policy refusal), an interrupted command, a request or an answer
// over the frame limit, and the caller's own cancellation and deadline.
func errorsOfEveryKind() []error {
	var errs []error
	for _, k := range workspace.Kinds {
		errs = append(errs, fmt.Errorf("%w: the cause", k), &policy.Violation{Err: k, Rule: "rule", Detail: "what was wrong"})
	}
	return append(errs,
		&workspace.Interrupted{Started: true}, &workspace.Interrupted{},
		&policy.Violation{Err: workspace.ErrTooLarge, Rule: agent.RuleFrameSize, Detail: agent.FrameTooLarge(agent.MaxHeader+1, 0).Message},
		context.Canceled, context.DeadlineExceeded)
}

// TestOnlyRetryableSaysRetry walks the REST error mapping: a 503, a Retry-After header
// or "retry" in the body only for an error a retry of the same call may fix.
func TestOnlyRetryableSaysRetry(t *testing.T) {
	gin.SetMode(gin.TestMode)
	for _, err := range errorsOfEveryKind() {
		t.Run(err.Error(), func(t *testing.T) {
			w := httptest.NewRecorder()
			c, _ := gin.CreateTestContext(w)
			c.Request = httptest.NewRequest(http.MethodPost, "/v1/sessions/s/tools/listFiles", nil)
			fail(c, slog.New(slog.DiscardHandler), err)
			says := w.Code == http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "" ||
				strings.Contains(strings.ToLower(w.Body.String()), "retry")
			if want := workspace.Retryable(err); says != want {
				t.Errorf("%d %s (Retry-After %q): says retry = %v, want %v", w.Code, w.Body, w.Header().Get("Retry-After"), says, want)
			}
			if w.Code == http.StatusInternalServerError && !strings.Contains(err.Error(), "context") {
				t.Errorf("%v: 500 for a domain error", err)
			}
		})
	}
}

// TestTooLargeNamesTheLimit: an answer over the frame limit is a 413 that says which
// limit, never a 503.
func TestTooLargeNamesTheLimit(t *testing.T) {
	gin.SetMode(gin.TestMode)
	w := httptest.NewRecorder()
	c, _ := gin.CreateTestContext(w)
	c.Request = httptest.NewRequest(http.MethodPost, "/v1/sessions/s/tools/listFiles", nil)
	fail(c, slog.New(slog.DiscardHandler), &policy.Violation{Err: workspace.ErrTooLarge, Rule: agent.RuleFrameSize,
		Detail: "the answer is 1769353 bytes, over the 1048576 bytes one answer from the workspace may hold"})
	if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "1048576") || !strings.Contains(w.Body.String(), agent.RuleFrameSize) {
		t.Errorf("%d %s, want 413 naming the limit and rule %s", w.Code, w.Body, agent.RuleFrameSize)
	}
}
