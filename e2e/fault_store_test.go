package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cwsdev/cws/internal/testenv"
)

// TestFaultStoreFrozen freezes Redis (SIGSTOP on a test-owned redis-server): MCP and
// REST calls fail with a retryable error (-32603 with data.retryable; 503 with
// Retry-After) instead of hanging, /readyz and cws_store_up say the store is down, and
// once Redis thaws everything works again without a restart.
func TestFaultStoreFrozen(t *testing.T) {
	requireRealDeps(t)
	fx := newFixture(t)
	redisURL, redisProc := testenv.OwnRedis(t)
	p := startCWSWith(t, fx, redisURL, freeAddr(t), "--store-timeout", "500ms")
	t.Cleanup(func() { p.deleteAll(t, fx, tenantAcme) })
	tok := fx.token(t, tenantAcme, "frank", "")
	c := connect(t, p.url+"/mcp", tok, "")
	c.call(t, "writeFile", map[string]any{"path": "f.txt", "contents": "before\n"})

	if err := redisProc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = redisProc.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)

	// The hang guard is generous: the point is "fails, retryably", not how fast.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "readFile", Arguments: map[string]any{"path": "f.txt"}})
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != -32603 {
		t.Fatalf("readFile with Redis frozen = %v, want JSON-RPC -32603", err)
	}
	var data struct {
		Retryable  bool
		RetryAfter int
	}
	_ = json.Unmarshal(we.Data, &data)
	if !data.Retryable || data.RetryAfter <= 0 {
		t.Errorf("error data = %s, want retryable with retryAfter", we.Data)
	}
	r := do(t, nil, p.url, http.MethodGet, "/v1/sessions", tok, nil, nil)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Errorf("GET /v1/sessions with Redis frozen = %d (Retry-After %q) %s, want 503 with Retry-After", r.status, r.header.Get("Retry-After"), r.body)
	}
	r = do(t, nil, p.url, http.MethodGet, "/readyz", "", nil, nil)
	if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "store") {
		t.Errorf("/readyz with Redis frozen = %d %s, want 503 naming the store", r.status, r.body)
	}
	if up, ok := metricValue(p.metrics(t), "cws_store_up", nil); !ok || up != 0 {
		t.Errorf("cws_store_up with Redis frozen = %v (present %v), want 0", up, ok)
	}

	thaw()
	waitFor(t, 60*time.Second, "/readyz after Redis thawed", func() bool {
		return do(t, nil, p.url, http.MethodGet, "/readyz", "", nil, nil).status == http.StatusOK
	})
	if got := c.call(t, "readFile", map[string]any{"path": "f.txt"}); got["content"] != "before\n" {
		t.Errorf("readFile after Redis thawed = %v", got)
	}
	if up, _ := metricValue(p.metrics(t), "cws_store_up", nil); up != 1 {
		t.Errorf("cws_store_up after Redis thawed = %v, want 1", up)
	}
}
