package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/policy"
)

// A failed call is logged at warn with tenant, session, tool, code and duration, never
// its arguments (nor, for refusals, the message that may echo them), and counted.
func TestFailedCallsLogged(t *testing.T) {
	var buf bytes.Buffer
	var codes []string
	h := &Handler{log: slog.New(slog.NewJSONHandler(&buf, nil)), cfg: Config{OnCallFailed: func(c string) { codes = append(codes, c) }}}
	for _, err := range []error{
		&policy.Violation{Err: workspace.ErrPolicy, Path: "secret/args.txt", Rule: "deniedPaths"},
		fmt.Errorf("%w: redis down", workspace.ErrUnavailable),
		errors.New("boom"),
	} {
		h.failed(context.Background(), "acme", "s-1", "writeFile", time.Now(), err)
	}
	logs := buf.String()
	if strings.Count(logs, `"level":"WARN"`) != 3 || strings.Contains(logs, "secret/args.txt") {
		t.Errorf("logs:\n%s\nwant three warnings and no argument", logs)
	}
	for _, k := range []string{`"tenant":"acme"`, `"session":"s-1"`, `"tool":"writeFile"`, `"code":-32002`, `"code":-32603`, `"duration_seconds"`} {
		if !strings.Contains(logs, k) {
			t.Errorf("logs lack %s:\n%s", k, logs)
		}
	}
	if strings.Join(codes, ",") != "-32002,-32603,-32603" {
		t.Errorf("counted codes %v", codes)
	}
}
