package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

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
