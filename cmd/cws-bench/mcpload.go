package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cwsdev/cws/api"
	cwsmcp "github.com/cwsdev/cws/api/mcp"
	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func init() {
	sections = append(sections, section{
		Name:  "mcp",
		Order: 70,
		Doc:   "readFile 4 KiB over MCP Streamable HTTP with a JWT (the real router, Docker sandboxes) at 1, 10 and 50 concurrent sessions",
		Run:   benchMCP,
	})
	goals = append(goals,
		goal{Order: 10, Figure: "MCP readFile 4 KiB, p50 (JWT, MCP, agent, back)", Row: "MCP readFile 4 KiB, 1 session(s)", Anchor: "docker exec cat 4 KiB",
			MaxP50: 300 * time.Microsecond, Faster: 50},
		goal{Order: 11, Figure: "throughput, 50 sessions calling at once", Row: "MCP readFile 4 KiB, 50 session(s)", MinRate: 3000},
	)
}

// rawReadFile returns one session's call: a bare JSON-RPC tools/call POST, read to the
// end and checked, as a light MCP client makes it (the go-sdk client costs more CPU
// than cws does on this path, and shares the cores).
func rawReadFile(c *http.Client, endpoint, token string) func(context.Context) error {
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"readFile","arguments":{"path":"f4k"}}}`)
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || !bytes.Contains(got, []byte(`"result"`)) || bytes.Contains(got, []byte(`"isError":true`)) ||
			!bytes.Contains(got, []byte("0123456789abcdef0123")) {
			return fmt.Errorf("tools/call readFile: HTTP %d: %.300s", resp.StatusCode, got)
		}
		return nil
	}
}

// bearer adds a token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func benchMCP(ctx context.Context, e *env) ([]bench.Row, error) {
	tenants, _ := auth.NewDevTenants()
	devPolicies := policy.ByTenant{auth.DevTenantID: policy.Default()}
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: memstore.New(), Sandboxes: e.driver, Tenants: devPolicies, DefaultImage: e.image, LocalReads: e.localReads})
	defer svc.Close()
	verifier := auth.NewVerifier(tenants, auth.VerifierOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	base := "http://" + ln.Addr().String()
	mh := cwsmcp.New(cwsmcp.Config{Service: svc, Verifier: verifier, Tenants: devPolicies, ResourceMetadataURL: base + auth.WellKnownPath})
	hs := &http.Server{Handler: api.New(api.Config{Service: svc, Verifier: verifier, MCP: mh, PublicURL: base})}
	go hs.Serve(ln)
	defer hs.Close()

	levels := []int{1, 10, 50}
	var sessions []*workspace.Session
	defer func() {
		e.logf("removing %d sessions…", len(sessions))
		for _, s := range sessions {
			_ = svc.DeleteSession(context.WithoutCancel(ctx), workspace.Caller{Tenant: auth.DevTenantID, Subject: s.Subject, Scopes: auth.AllScopes()}, s.ID)
		}
	}()
	transport := &http.Transport{MaxIdleConns: 200, MaxIdleConnsPerHost: 200}
	content := strings.Repeat("0123456789abcdef", 256) // 4 KiB
	var rows []bench.Row
	for _, k := range levels {
		for len(sessions) < k {
			e.logf("creating session %d/%d…", len(sessions)+1, k)
			caller := workspace.Caller{Tenant: auth.DevTenantID, Subject: fmt.Sprintf("bench-%d", len(sessions)), Scopes: auth.AllScopes()}
			s, err := svc.CreateSession(ctx, caller, workspace.CreateRequest{})
			if err != nil {
				return rows, err
			}
			sessions = append(sessions, s)
			if _, err := svc.Call(ctx, caller, s.ID, "writeFile", []byte(`{"path":"f4k","contents":"`+content+`"}`), workspace.CallOptions{}); err != nil {
				return rows, err
			}
		}
		per := e.iterations(max(200, 2000/k))
		e.logf("MCP readFile with %d concurrent sessions, %d calls each…", k, per)
		var (
			mu       sync.Mutex
			samples  []time.Duration
			wg       sync.WaitGroup
			firstErr error
		)
		fail := func(err error) {
			mu.Lock()
			defer mu.Unlock()
			if firstErr == nil {
				firstErr = err
			}
		}
		wait := watchCPU()
		start := time.Now()
		for i := 0; i < k; i++ {
			wg.Add(1)
			go func(s *workspace.Session) {
				defer wg.Done()
				tok, err := tenants.Get(auth.DevTenantID).Mint(s.Subject, time.Hour, s.ID, nil, time.Now())
				if err != nil {
					fail(err)
					return
				}
				call := rawReadFile(&http.Client{Transport: transport}, base+"/mcp", tok)
				mine, err := bench.Run(ctx, 5, per, call)
				if err != nil {
					fail(err)
				}
				mu.Lock()
				samples = append(samples, mine...)
				mu.Unlock()
			}(sessions[i])
		}
		wg.Wait()
		wall := time.Since(start)
		if firstErr != nil {
			return rows, firstErr
		}
		row := bench.Summarize(fmt.Sprintf("MCP readFile 4 KiB, %d session(s)", k), samples)
		row.Rate = float64(len(samples)) / wall.Seconds()
		row.Note = fmt.Sprintf("%.0f calls/s; raw JSON-RPC over HTTP, JWT, one client per session", row.Rate)
		if note := wait.note(); note != "" {
			row.Note += "; " + note
		}
		rows = append(rows, row)

		if k == 1 {
			// The official client on the same session: what an MCP host sees.
			s := sessions[0]
			tok, err := tenants.Get(auth.DevTenantID).Mint(s.Subject, time.Hour, s.ID, nil, time.Now())
			if err != nil {
				return rows, err
			}
			client := sdk.NewClient(&sdk.Implementation{Name: "cws-bench", Version: "1"}, nil)
			cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: base + "/mcp", DisableStandaloneSSE: true,
				HTTPClient: &http.Client{Transport: bearer{tok, transport}}}, nil)
			if err != nil {
				return rows, err
			}
			n := e.iterations(1000)
			e.logf("MCP readFile with the go-sdk client × %d…", n)
			got, err := bench.Run(ctx, 20, n, func(ctx context.Context) error {
				res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "readFile", Arguments: map[string]any{"path": "f4k"}})
				if err == nil && res.IsError {
					err = fmt.Errorf("readFile failed")
				}
				return err
			})
			cs.Close()
			row := bench.Summarize("MCP readFile 4 KiB, go-sdk client", got)
			row.Note = "the official go-sdk client, 1 session"
			rows = append(rows, row)
			if err != nil {
				return rows, err
			}
		}
	}
	return rows, nil
}
