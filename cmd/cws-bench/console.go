package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os/exec"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cwsdev/cws/api"
	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
)

func init() {
	sections = append(sections, section{
		Name:  "console",
		Order: 97,
		Doc:   "the web console in headless Chromium: first paint of a 1,000-session list, and a new session showing up without a reload",
		Run:   benchConsole,
	})
	goals = append(goals,
		goal{Order: 90, Figure: "console: sessions list of 1,000 sessions, first paint (navigation to every row drawn), p50", Row: "console: 1,000-session list, first paint", MaxP50: time.Second},
	)
}

func benchConsole(ctx context.Context, e *env) ([]bench.Row, error) {
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		return nil, fmt.Errorf("no chromium on PATH (make deps installs it): %w", err)
	}
	store := memstore.New()
	tenants, _ := auth.NewDevTenants()
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Store: store, Sandboxes: e.driver,
		Tenants: policy.ByTenant{auth.DevTenantID: policy.Default()}, DefaultImage: e.image,
		Log: slog.New(slog.NewTextHandler(e.progress, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	defer svc.Close()
	// A thousand session records (the list reads the store; no sandbox is needed).
	now := time.Now().UTC()
	add := func(i int) error {
		return store.CreateSession(ctx, &workspace.Session{ID: fmt.Sprintf("s-bench%015d", i), Tenant: auth.DevTenantID, Subject: "bench",
			Image: e.image, State: workspace.StateReady, Sandbox: fmt.Sprintf("none-%d", i), Labels: map[string]string{"app": fmt.Sprint("svc-", i%7)},
			CreatedAt: now.Add(-time.Duration(i) * time.Minute), LastUsed: now, IdleTTL: time.Hour, ExpiresAt: now.Add(24 * time.Hour)}, 0)
	}
	for i := range 1000 {
		if err := add(i); err != nil {
			return nil, err
		}
	}
	hs := httptest.NewUnstartedServer(nil)
	hs.Config.Handler = api.New(api.Config{Service: svc, Verifier: auth.NewVerifier(tenants, auth.VerifierOptions{}), PublicURL: "http://" + hs.Listener.Addr().String()})
	hs.Start()
	defer hs.Close()
	tok, err := tenants.Get(auth.DevTenantID).Mint("bench", time.Hour, "", nil, time.Now())
	if err != nil {
		return nil, err
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.WindowSize(1280, 900))
	actx, cancel := chromedp.NewExecAllocator(ctx, opts...)
	defer cancel()
	bctx, cancel2 := chromedp.NewContext(actx)
	defer cancel2()
	if err := chromedp.Run(bctx, chromedp.Navigate(hs.URL+"/console/"),
		chromedp.Evaluate(fmt.Sprintf(`sessionStorage.setItem("cws.token", %q)`, tok), nil)); err != nil {
		return nil, fmt.Errorf("chromium: %w", err)
	}
	rows := func(n int) chromedp.Action {
		return chromedp.Poll(fmt.Sprintf(`document.querySelectorAll("table.sessions tbody tr").length >= %d`, n), nil,
			chromedp.WithPollingInterval(5*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second))
	}
	var paint []time.Duration
	for i := range e.iterations(10) {
		t0 := time.Now()
		if err := chromedp.Run(bctx, chromedp.Navigate(fmt.Sprintf("%s/console/?r=%d#/sessions", hs.URL, i)), rows(1000)); err != nil {
			return nil, fmt.Errorf("first paint: %w", err)
		}
		paint = append(paint, time.Since(t0))
	}
	var live []time.Duration
	for i := range e.iterations(5) {
		t0 := time.Now()
		if err := add(1000 + i); err != nil {
			return nil, err
		}
		if err := chromedp.Run(bctx, rows(1001+i)); err != nil {
			return nil, fmt.Errorf("live update: %w", err)
		}
		live = append(live, time.Since(t0))
	}
	return []bench.Row{
		note(bench.Summarize("console: 1,000-session list, first paint", paint), "a fresh page load: HTML, 95 KB of script, GET /v1/sessions, 1,000 rows drawn"),
		note(bench.Summarize("console: a new session appears, no reload", live), "the list refreshes every 3 s in place"),
	}, nil
}
