package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/internal/testenv"
)

// chromium finds Debian's headless-capable Chromium (scripts/deps.sh installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.RequireCI(t, "chromium", fmt.Errorf("no chromium on PATH"))
	return ""
}

// artifacts is where the console tests' screenshots go: $CWS_ARTIFACTS/console, else
// /tmp/cws-artifacts/console.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(cmpOr(os.Getenv("CWS_ARTIFACTS"), "/tmp/cws-artifacts"), "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// browser is one headless Chromium tab at 1280×900, ended with the test.
func browser(t *testing.T, width, height int) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // root in CI: the sandbox needs a user namespace per renderer
		chromedp.WindowSize(width, height),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	if err := chromedp.Run(ctx); err != nil { // starts the browser, for the life of ctx
		t.Fatalf("start chromium: %v", err)
	}
	// confirm() and prompt() are answered yes (the delete button asks).
	chromedp.ListenTarget(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			go func() { _ = chromedp.Run(ctx, page.HandleJavaScriptDialog(true)) }()
		}
	})
	return ctx
}

func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var png []byte
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(artifacts(t), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// run runs actions, failing the test with what was on screen when one fails.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Run(sctx, actions...); err != nil {
		var body string
		_ = chromedp.Run(ctx, chromedp.Text("body", &body, chromedp.ByQuery))
		t.Fatalf("%s: %v\npage text:\n%s", what, err, body)
	}
}

// waitText waits until sel's text contains want.
func waitText(sel, want string) chromedp.Action {
	return chromedp.Poll(fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent.includes(%q); })()`, sel, want), nil,
		chromedp.WithPollingTimeout(60*time.Second), chromedp.WithPollingInterval(200*time.Millisecond))
}

func signIn(t *testing.T, ctx context.Context, url, tok string) {
	t.Helper()
	run(t, ctx, "sign in",
		chromedp.Navigate(url+"/console"),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SetValue("#token", tok, chromedp.ByID),
		chromedp.Click(`form.signin button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible("table.sessions", chromedp.ByQuery),
	)
}

// TestConsoleBrowser drives the console in a real Chromium against a real cws on
// Docker: sign in, see the session in the list, open it, browse to a file and read it
// (a denied file is not listed), run `git status` in the terminal, watch a background
// process's output arrive, see the calls in the audit timeline, delete the session;
// another tenant's session id shows not-found, and a token without tools:exec sees no
// terminal. Screenshots of each page go to $CWS_ARTIFACTS/console.
func TestConsoleBrowser(t *testing.T) {
	requireRealDeps(t)
	chromium(t)
	fx := newFixture(t)
	p := startCWSWith(t, fx, testenv.Redis(t), freeAddr(t), "--admin-tenant", tenantOpen, "--usage-every", "2s")
	t.Cleanup(func() { p.deleteAll(t, fx, tenantVSCode, tenantAcme) })
	tok := fx.token(t, tenantVSCode, "console", "")
	r := p.post(t, tok, "/v1/sessions", map[string]any{"labels": map[string]string{"app": "console"}})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decode[lifeView](t, r).ID
	c := connect(t, p.url+"/v1/sessions/"+id+"/mcp", tok, "")
	c.call(t, "writeFile", map[string]any{"path": "main.go", "contents": "package main\n\nfunc main() { println(\"hello from the console test\") }\n"})
	c.call(t, "runCommand", map[string]any{"command": "sh", "args": []string{"-c", "echo TOP_SECRET=hunter2 > .env"}}) // denied to the file tools
	c.call(t, "runCommand", map[string]any{"command": "git", "args": []string{"init", "-q", "-b", "main"}})
	c.call(t, "startProcess", map[string]any{"command": "sh", "args": []string{"-c", "for i in 1 2 3; do echo tick $i; sleep 1; done; echo ticks done"}})
	other := decode[lifeView](t, p.post(t, fx.token(t, tenantAcme, "other", ""), "/v1/sessions", map[string]any{})).ID

	ctx := browser(t, 1280, 900)
	signIn(t, ctx, p.url, tok)
	run(t, ctx, "the sessions list shows the session", waitText("table.sessions", id), waitText("table.sessions", "app=console"))
	shot(t, ctx, "sessions")

	run(t, ctx, "open the session", chromedp.Click(fmt.Sprintf(`a[href="#/sessions/%s"]`, id), chromedp.ByQuery), waitText(".session-head", "ready"))
	shot(t, ctx, "session-details")

	run(t, ctx, "browse to main.go and read it",
		chromedp.Click(`nav.tabs a[href$="/files"]`, chromedp.ByQuery),
		waitText("nav.files", "main.go"),
		chromedp.Click(`//nav[contains(@class,"files")]//button[text()="main.go"]`, chromedp.BySearch),
		waitText(".viewer", "hello from the console test"),
		chromedp.WaitVisible(".viewer .hljs-keyword", chromedp.ByQuery), // highlighted
	)
	var listing, html string
	run(t, ctx, "read the listing", chromedp.Text("nav.files", &listing, chromedp.ByQuery), chromedp.OuterHTML("html", &html, chromedp.ByQuery))
	if strings.Contains(listing, ".env") || strings.Contains(html, "hunter2") {
		t.Errorf("the denied .env shows in the console: listing %q", listing)
	}
	shot(t, ctx, "session-files")

	run(t, ctx, "git status in the terminal",
		chromedp.Click(`nav.tabs a[href$="/terminal"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#cmd", chromedp.ByID),
		chromedp.SendKeys("#cmd", "git status\n", chromedp.ByID),
		waitText("pre.terminal", "On branch main"),
	)
	shot(t, ctx, "session-terminal")

	run(t, ctx, "the background process's output arrives",
		chromedp.Click(`nav.tabs a[href$="/processes"]`, chromedp.ByQuery),
		waitText("pre.output", "tick 1"),
		waitText("pre.output", "ticks done"),
	)
	shot(t, ctx, "session-processes")

	run(t, ctx, "the audit timeline shows the calls",
		chromedp.Click(`nav.tabs a[href$="/audit"]`, chromedp.ByQuery),
		waitText("table.audit", "readFile"),
		waitText("table.audit", "runCommand"),
		waitText("table.audit", `"git"`),
	)
	shot(t, ctx, "session-audit")

	run(t, ctx, "another tenant's session is not found",
		chromedp.Navigate(p.url+"/console/#/sessions/"+other),
		waitText("main", "Session not found"),
	)

	run(t, ctx, "delete the session",
		chromedp.Navigate(p.url+"/console/#/sessions/"+id),
		waitText(".session-head", "ready"),
		chromedp.Click(`//div[contains(@class,"actions")]//button[text()="Delete"]`, chromedp.BySearch),
		chromedp.WaitVisible("table.sessions", chromedp.ByQuery),
	)
	if g := do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+id, tok, nil, nil); g.status != http.StatusNotFound {
		t.Errorf("after the console's delete: GET %d %s", g.status, g.body)
	}

	// A token without tools:exec sees no terminal.
	second := decode[lifeView](t, p.post(t, tok, "/v1/sessions", map[string]any{})).ID
	scoped, err := fx.tenants.Get(tenantVSCode).Mint("reader", time.Hour, "", []string{auth.ScopeSessions, auth.ScopeToolsRead}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx2 := browser(t, 1280, 900)
	signIn(t, ctx2, p.url, scoped)
	var tabs string
	run(t, ctx2, "a scoped token's session page",
		chromedp.Navigate(p.url+"/console/#/sessions/"+second),
		waitText("nav.tabs", "Audit"),
		chromedp.Text("nav.tabs", &tabs, chromedp.ByQuery),
	)
	if strings.Contains(tabs, "Terminal") {
		t.Errorf("a token without tools:exec sees the tabs %q", tabs)
	}

	// The operator's view, on a phone-sized screen.
	adminTok, err := fx.tenants.Get(tenantOpen).Mint("operator", time.Hour, "", []string{auth.ScopeAdmin}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx3 := browser(t, 1280, 900)
	signIn(t, ctx3, p.url, adminTok)
	run(t, ctx3, "the admin sessions list spans tenants", waitText("table.sessions", second), waitText("table.sessions", other), waitText("table.sessions", tenantAcme))
	shot(t, ctx3, "admin-sessions")
	run(t, ctx3, "the admin overview", chromedp.Navigate(p.url+"/console/#/"), waitText("main", tenantVSCode), waitText("main", "calls/s"))
	shot(t, ctx3, "admin-overview")
	ctx4 := browser(t, 390, 844)
	signIn(t, ctx4, p.url, tok)
	shot(t, ctx4, "phone-sessions")
}

// TestAdminRole: /v1/admin answers only a token of --admin-tenant carrying scope
// admin: not the same tenant without it, not another tenant with it, not an expired
// one; and usage is sampled and shown per session.
func TestAdminRole(t *testing.T) {
	requireRealDeps(t)
	fx := newFixture(t)
	p := startCWSWith(t, fx, testenv.Redis(t), freeAddr(t), "--admin-tenant", tenantOpen, "--usage-every", "1s")
	t.Cleanup(func() { p.deleteAll(t, fx, tenantAcme) })
	mint := func(tenant string, scopes []string, ttl time.Duration, at time.Time) string {
		tok, err := fx.tenants.Get(tenant).Mint("op", ttl, "", scopes, at)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	acme := fx.token(t, tenantAcme, "user", "")
	id := decode[lifeView](t, p.post(t, acme, "/v1/sessions", map[string]any{})).ID
	for _, tc := range []struct {
		name   string
		tok    string
		status int
	}{
		{"admin tenant with scope admin", mint(tenantOpen, []string{auth.ScopeAdmin}, time.Hour, time.Now()), http.StatusOK},
		{"admin tenant without scope admin", mint(tenantOpen, auth.AllScopes(), time.Hour, time.Now()), http.StatusForbidden},
		{"admin tenant, no scope claim (its defaults)", fx.token(t, tenantOpen, "op", ""), http.StatusForbidden},
		{"another tenant with scope admin", mint(tenantAcme, []string{auth.ScopeAdmin}, time.Hour, time.Now()), http.StatusForbidden},
		{"expired", mint(tenantOpen, []string{auth.ScopeAdmin}, time.Minute, time.Now().Add(-time.Hour)), http.StatusUnauthorized},
		{"no token", "", http.StatusUnauthorized},
	} {
		for _, path := range []string{"/v1/admin/sessions", "/v1/admin/tenants"} {
			g := do(t, nil, p.url, http.MethodGet, path, tc.tok, nil, nil)
			if g.status != tc.status {
				t.Errorf("%s: GET %s = %d %s, want %d", tc.name, path, g.status, g.body, tc.status)
			}
			if tc.status == http.StatusOK && path == "/v1/admin/sessions" && !strings.Contains(string(g.body), id) {
				t.Errorf("the admin sessions list lacks %s: %s", id, g.body)
			}
		}
	}
	// The admin's token reaches no tenant's tools: admin is a view, not a key.
	adm := mint(tenantOpen, []string{auth.ScopeAdmin}, time.Hour, time.Now())
	if g := do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+id, adm, nil, nil); g.status != http.StatusNotFound && g.status != http.StatusForbidden {
		t.Errorf("the admin token on another tenant's session: %d %s", g.status, g.body)
	}
	// Usage: sampled from the engine in the background.
	c := connect(t, p.url+"/v1/sessions/"+id+"/mcp", acme, "")
	c.call(t, "writeFile", map[string]any{"path": "big.txt", "contents": strings.Repeat("x", 100_000)})
	var u struct {
		CPUSeconds  float64 `json:"cpuSeconds"`
		MemoryBytes int64   `json:"memoryBytes"`
		DiskBytes   int64   `json:"diskBytes"`
		Processes   int     `json:"processes"`
	}
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		g := do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+id+"/usage", acme, nil, nil)
		if g.status != http.StatusOK {
			t.Fatalf("usage: %d %s", g.status, g.body)
		}
		_ = json.Unmarshal(g.body, &u)
		if u.MemoryBytes > 0 && u.DiskBytes >= 100_000 && u.CPUSeconds > 0 && u.Processes > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("usage never filled in: %s", g.body)
		}
	}
	if v, ok := metricValue(p.metrics(t), "cws_session_cpu_seconds_total", map[string]string{"tenant": tenantAcme}); !ok || v < 0 {
		t.Errorf("cws_session_cpu_seconds_total{tenant=%s} = %v, %v", tenantAcme, v, ok)
	}
	if g := do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+id+"/usage", fx.token(t, tenantBeta, "x", ""), nil, nil); g.status != http.StatusNotFound {
		t.Errorf("another tenant's usage: %d %s", g.status, g.body)
	}
}
