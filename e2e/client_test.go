package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bearer adds a fixed Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func bearerClient(token string) *http.Client {
	return &http.Client{Transport: bearer{token: token, next: http.DefaultTransport}}
}

// mcpClient is a go-sdk client session plus the progress notifications it received.
type mcpClient struct {
	*mcp.ClientSession
	mu       sync.Mutex
	progress []*mcp.ProgressNotificationParams
}

// connect opens an MCP session on endpoint with token; version "" takes the SDK's
// default (its latest).
func connect(t testing.TB, endpoint, token, version string) *mcpClient {
	t.Helper()
	c := &mcpClient{}
	client := mcp.NewClient(&mcp.Implementation{Name: "cws-e2e", Version: "0.0.1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			c.mu.Lock()
			c.progress = append(c.progress, req.Params)
			c.mu.Unlock()
		},
	})
	var opts *mcp.ClientSessionOptions
	if version != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: bearerClient(token)}, opts)
	if err != nil {
		t.Fatalf("connect to %s: %v", endpoint, err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	c.ClientSession = sess
	return c
}

func (c *mcpClient) progressMessages() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, p := range c.progress {
		out = append(out, p.Message)
	}
	return out
}

// call calls tool with args and returns its structured result, failing the test on
// any error.
func (c *mcpClient) call(t testing.TB, tool string, args map[string]any) map[string]any {
	t.Helper()
	res, err := c.callRaw(tool, args, nil)
	if err != nil {
		t.Fatalf("%s %v: %v", tool, args, err)
	}
	if res.IsError {
		t.Fatalf("%s %v: tool error: %s", tool, args, text(res))
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(text(res)), &out); err != nil {
		t.Fatalf("%s: result is not a JSON object: %v: %s", tool, err, text(res))
	}
	return out
}

func (c *mcpClient) callRaw(tool string, args map[string]any, meta mcp.Meta) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return c.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args, Meta: meta})
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// rpcCode returns the JSON-RPC error code in err, failing when there is none.
func rpcCode(t testing.TB, err error) (int64, string) {
	t.Helper()
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Fatalf("want a JSON-RPC error, got %T: %v", err, err)
	}
	return we.Code, we.Message
}

// rest is one REST answer.
type rest struct {
	status int
	header http.Header
	body   []byte
}

// do sends a REST request with token ("" for none) and reads the whole answer.
func do(t testing.TB, h http.Handler, base, method, path, token string, body []byte, hdr map[string]string) rest {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if h != nil { // in-process
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return rest{status: w.Code, header: w.Result().Header, body: w.Body.Bytes()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return rest{status: resp.StatusCode, header: resp.Header, body: b}
}

// initializeBody is an MCP initialize request, for raw HTTP probes of /mcp.
const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"probe","version":"0"}}}`

var mcpHeaders = map[string]string{"Accept": "application/json, text/event-stream"}

// sessionView is the part of a REST session the tests read.
type sessionView struct {
	ID     string `json:"id"`
	Sub    string `json:"sub"`
	State  string `json:"state"`
	MCPURL string `json:"mcpUrl"`
}

func decode[T any](t testing.TB, r rest) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode %T from %d %s: %v", v, r.status, r.body, err)
	}
	return v
}

// metricValue finds name{labels} in a Prometheus text exposition; ok is false when
// the series is absent.
func metricValue(exposition, name string, labels map[string]string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(exposition))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || !strings.HasPrefix(line, name) {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		n, lbls, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
		if n != name {
			continue
		}
		got := map[string]string{}
		for _, kv := range splitLabels(lbls) {
			k, v, _ := strings.Cut(kv, "=")
			got[k], _ = strconv.Unquote(v)
		}
		match := true
		for k, v := range labels {
			if got[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		return f, err == nil
	}
	return 0, false
}

// splitLabels splits `a="x",b="y,z"` at the commas between pairs.
func splitLabels(s string) []string {
	var out []string
	in, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			in = !in
		case ',':
			if !in {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// wireError is a JSON-RPC error as it is on the wire.
type wireError struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// rawToolCall sends one tools/call to an MCP endpoint as plain JSON-RPC over HTTP (no
// SDK; the stateless server needs no initialize) and returns the answer's error, nil
// when the call succeeded. It reads the code as sent: the go-sdk client folds -32003
// and -32004 into its own "connection closed" errors (see TestEndToEnd).
func rawToolCall(t testing.TB, endpoint, token, tool string, args any) *wireError {
	t.Helper()
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "tools/call",
		"params": map[string]any{"name": tool, "arguments": args}})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("tools/call %s: %v", tool, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tools/call %s: HTTP %d: %s", tool, resp.StatusCode, raw)
	}
	msgs := [][]byte{raw}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		msgs = nil
		for _, line := range strings.Split(string(raw), "\n") {
			if d, ok := strings.CutPrefix(line, "data:"); ok {
				msgs = append(msgs, []byte(strings.TrimSpace(d)))
			}
		}
	}
	for _, m := range msgs {
		var ans struct {
			ID     json.RawMessage `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *wireError      `json:"error"`
		}
		if json.Unmarshal(m, &ans) != nil || string(ans.ID) != "7" {
			continue
		}
		return ans.Error
	}
	t.Fatalf("tools/call %s: no answer in %s", tool, raw)
	return nil
}
