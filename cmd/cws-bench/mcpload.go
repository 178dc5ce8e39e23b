package main

import (
	"context"
	"fmt"
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
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: memstore.New(), Sandboxes: e.driver, Tenants: devPolicies, DefaultImage: e.image})
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
		start := time.Now()
		for i := 0; i < k; i++ {
			wg.Add(1)
			go func(s *workspace.Session) {
				defer wg.Done()
				tok, err := tenants.Get(auth.DevTenantID).Mint(s.Subject, time.Hour, s.ID, nil, time.Now())
				if err != nil {
					firstErr = err
					return
				}
				client := sdk.NewClient(&sdk.Implementation{Name: "cws-bench", Version: "1"}, nil)
				cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: base + "/mcp", DisableStandaloneSSE: true,
					HTTPClient: &http.Client{Transport: bearer{tok, transport}}}, nil)
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				defer cs.Close()
				mine, err := bench.Run(ctx, 5, per, func(ctx context.Context) error {
					res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "readFile", Arguments: map[string]any{"path": "f4k"}})
					if err == nil && res.IsError {
						err = fmt.Errorf("readFile failed")
					}
					return err
				})
				mu.Lock()
				defer mu.Unlock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				samples = append(samples, mine...)
			}(sessions[i])
		}
		wg.Wait()
		wall := time.Since(start)
		if firstErr != nil {
			return rows, firstErr
		}
		row := bench.Summarize(fmt.Sprintf("MCP readFile 4 KiB, %d session(s)", k), samples)
		row.Note = fmt.Sprintf("%.0f calls/s over HTTP+JWT", float64(len(samples))/wall.Seconds())
		rows = append(rows, row)
	}
	return rows, nil
}
