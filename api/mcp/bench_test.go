package mcp_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cwsdev/cws/api"
	"github.com/cwsdev/cws/api/mcp"
	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/sandbox/sandboxtest"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/redisstore"
	"github.com/cwsdev/cws/workspace/toolset"
)

// benchServer is the real router over sandboxtest.Local (a real agent server in
// process) and a store, with sessions holding a 4 KiB file.
type benchServer struct {
	url, token, session string
	tokens              []string // of sessions[i], for parallel runs
	sessions            []string
}

func newBenchServer(b *testing.B, store workspace.Store) *benchServer {
	return newBenchServerN(b, store, 1)
}

func newBenchServerN(b *testing.B, store workspace.Store, n int) *benchServer {
	b.Helper()
	tenants, _ := auth.NewDevTenants()
	pols := policy.ByTenant{auth.DevTenantID: policy.Default()}
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: store, Sandboxes: sandboxtest.New(b),
		Tenants: pols, DefaultImage: "local"})
	b.Cleanup(svc.Close)
	verifier := auth.NewVerifier(tenants, auth.VerifierOptions{})
	mh := mcp.New(mcp.Config{Service: svc, Verifier: verifier, Tenants: pols})
	hs := httptest.NewServer(api.New(api.Config{Service: svc, Verifier: verifier, MCP: mh, PublicURL: "http://cws.test"}))
	b.Cleanup(hs.Close)
	s := &benchServer{url: hs.URL}
	content := strings.Repeat("0123456789abcdef", 256)
	for i := range n {
		sub := fmt.Sprint("bench-", i)
		caller := workspace.Caller{Tenant: auth.DevTenantID, Subject: sub, Scopes: auth.AllScopes()}
		sess, err := svc.CreateSession(b.Context(), caller, workspace.CreateRequest{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := svc.Call(b.Context(), caller, sess.ID, "writeFile", []byte(`{"path":"f4k","contents":"`+content+`"}`), workspace.CallOptions{}); err != nil {
			b.Fatal(err)
		}
		tok, err := tenants.Get(auth.DevTenantID).Mint(sub, time.Hour, sess.ID, nil, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		s.tokens, s.sessions = append(s.tokens, tok), append(s.sessions, sess.ID)
	}
	s.token, s.session = s.tokens[0], s.sessions[0]
	return s
}

func (s *benchServer) post(b *testing.B, client *http.Client, path, body string, hdr ...string) []byte {
	return s.postAs(b, client, s.token, path, body, hdr...)
}

func (s *benchServer) postAs(b *testing.B, client *http.Client, token, path, body string, hdr ...string) []byte {
	req, _ := http.NewRequest(http.MethodPost, s.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("POST %s: %d %s", path, resp.StatusCode, out)
	}
	return out
}

// BenchmarkReadFile4K measures one readFile of 4 KiB through the whole of cws: HTTP,
// JWT, MCP (or REST), the call pipeline, the agent client and an in-process agent.
// Profile it with -cpuprofile; the agent server's share is not cws's.
//
//	go test ./api/mcp -run '^$' -bench ReadFile4K -benchtime 3000x -cpuprofile /tmp/cpu.out
func BenchmarkReadFile4K(b *testing.B) {
	stores := map[string]func(b *testing.B) workspace.Store{
		"memstore": func(b *testing.B) workspace.Store { return memstore.New() },
		"redis": func(b *testing.B) workspace.Store {
			opt, err := redis.ParseURL(testenv.Redis(b))
			if err != nil {
				b.Fatal(err)
			}
			return redisstore.New(redis.NewClient(opt), redisstore.Options{Prefix: fmt.Sprintf("cwsbench:%d:", time.Now().UnixNano())})
		},
	}
	for _, name := range []string{"memstore", "redis"} {
		b.Run(name, func(b *testing.B) {
			s := newBenchServer(b, stores[name](b))
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			want := []byte("0123456789abcdef0123")
			b.Run("mcp", func(b *testing.B) {
				body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"readFile","arguments":{"path":"f4k"}}}`
				defer reportCPU(b)()
				for b.Loop() {
					if out := s.post(b, client, "/mcp", body, "Mcp-Protocol-Version", "2025-06-18"); !bytes.Contains(out, want) {
						b.Fatalf("unexpected answer %s", out)
					}
				}
			})
			b.Run("rest", func(b *testing.B) {
				defer reportCPU(b)()
				for b.Loop() {
					if out := s.post(b, client, "/v1/sessions/"+s.session+"/tools/readFile", `{"path":"f4k"}`); !bytes.Contains(out, want) {
						b.Fatalf("unexpected answer %s", out)
					}
				}
			})
		})
	}
}

// BenchmarkReadFile4KParallel is BenchmarkReadFile4K with 50 sessions calling at once
// over MCP, each its own client: it reports calls/s through the whole of cws.
//
//	go test ./api/mcp -run '^$' -bench ReadFile4KParallel -benchtime 5000x
func BenchmarkReadFile4KParallel(b *testing.B) {
	opt, err := redis.ParseURL(testenv.Redis(b))
	if err != nil {
		b.Fatal(err)
	}
	const sessions = 50
	s := newBenchServerN(b, redisstore.New(redis.NewClient(opt), redisstore.Options{Prefix: fmt.Sprintf("cwsbench:%d:", time.Now().UnixNano())}), sessions)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: sessions}}
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"readFile","arguments":{"path":"f4k"}}}`
	want := []byte("0123456789abcdef0123")
	var next atomic.Int64
	b.SetParallelism(sessions / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	defer reportCPU(b)()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		tok := s.tokens[int(next.Add(1)-1)%sessions]
		for pb.Next() {
			if out := s.postAs(b, client, tok, "/mcp", body, "Mcp-Protocol-Version", "2025-06-18"); !bytes.Contains(out, want) {
				b.Fatalf("unexpected answer %s", out)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
}

// reportCPU reports the process's CPU time (user and system) per op, client and
// in-process agent included, as cpu-ns/op.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() { b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op") }
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
