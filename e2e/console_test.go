package e2e_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

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
	// chromedp logs the top-layer event of a modal <dialog>, which it doesn't handle, as an
	// error; it is harmless (the console's dialogs are modal).
	ctx, cancel2 := chromedp.NewContext(actx, chromedp.WithErrorf(func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !strings.Contains(msg, "EventTopLayerElementsUpdated") {
			log.Print(msg)
		}
	}))
	t.Cleanup(cancel2)
	if err := chromedp.Run(ctx); err != nil { // starts the browser, for the life of ctx
		t.Fatalf("start chromium: %v", err)
	}
	// A native alert, confirm or prompt is counted (ctx.Value(nativeDialogs{})) and
	// answered yes, so that a test sees it instead of hanging.
	var native atomic.Int32
	chromedp.ListenTarget(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			native.Add(1)
			go func() { _ = chromedp.Run(ctx, page.HandleJavaScriptDialog(true)) }()
		}
	})
	return context.WithValue(ctx, nativeDialogs{}, &native)
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

// nativeDialogs counts the browser's own alert, confirm and prompt dialogs a tab opened
// (the console uses in-page dialogs: there should be none).
type nativeDialogs struct{}

// overflowJS measures the page: its scroll width against the screen's, and the element
// that sticks out furthest past the right edge without a scrolling box of its own.
const overflowJS = `(() => {
  const d = document.documentElement;
  let edge = d.clientWidth + 0.5, widest = "";
  for (const e of document.querySelectorAll("body *")) {
    const r = e.getBoundingClientRect();
    if (r.width === 0 || r.right <= edge) continue;
    let a = e.parentElement, inBox = false;
    for (; a && a !== document.body; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX;
      if (o === "auto" || o === "scroll" || o === "hidden") { inBox = true; break; }
    }
    if (inBox) continue;
    edge = r.right;
    widest = e.tagName.toLowerCase() + (e.className ? "." + String(e.className).replace(/ /g, ".") : "") + " (" + Math.round(r.right) + " px): " + (e.textContent || "").slice(0, 50);
  }
  return {scrollWidth: d.scrollWidth, clientWidth: d.clientWidth, widest};
})()`

// noOverflow checks that the page on screen fits the screen's width on a phone
// (390×844) and on a laptop (1280×900): nothing widens the page past its right edge.
// The tab is left at 1280×900.
func noOverflow(t *testing.T, ctx context.Context, page string) {
	t.Helper()
	for _, size := range [][2]int64{{390, 844}, {1280, 900}} {
		var m struct {
			ScrollWidth, ClientWidth int
			Widest                   string
		}
		run(t, ctx, fmt.Sprintf("measure %s at %d px", page, size[0]),
			chromedp.EmulateViewport(size[0], size[1]),
			chromedp.Evaluate(overflowJS, &m))
		if m.ScrollWidth > m.ClientWidth || m.Widest != "" {
			t.Errorf("%s at %d px: the page is %d px wide on a %d px screen; widest: %s", page, size[0], m.ScrollWidth, m.ClientWidth, m.Widest)
		}
	}
}

// axName is the accessible name Chromium computes for the first element matching sel.
func axName(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	var nodes []*cdp.Node
	run(t, ctx, "find "+sel, chromedp.Nodes(sel, &nodes, chromedp.ByQuery))
	var name string
	run(t, ctx, "the accessible name of "+sel, chromedp.ActionFunc(func(ctx context.Context) error {
		ax, err := accessibility.GetPartialAXTree().WithNodeID(nodes[0].NodeID).WithFetchRelatives(false).Do(ctx)
		if err != nil {
			return err
		}
		for _, n := range ax {
			if n.Name != nil {
				return json.Unmarshal([]byte(n.Name.Value), &name)
			}
		}
		return nil
	}))
	return name
}

// evalBool evaluates a JavaScript expression that yields a boolean.
func evalBool(t *testing.T, ctx context.Context, what, js string) bool {
	t.Helper()
	var ok bool
	run(t, ctx, what, chromedp.Evaluate(js, &ok))
	return ok
}

// detailsState is the Details tab's "state" value.
const detailsState = `(() => { const dt = [...document.querySelectorAll("dl.details dt")].find((d) => d.textContent === "state"); return dt ? dt.nextElementSibling.textContent : ""; })()`

// waitState waits until the header and the Details tab both say state.
func waitState(state string) chromedp.Action {
	return chromedp.Poll(fmt.Sprintf(`document.querySelector(".session-head .state")?.textContent === %q && %s === %q`, state, detailsState, state), nil,
		chromedp.WithPollingTimeout(60*time.Second), chromedp.WithPollingInterval(100*time.Millisecond))
}

// actionButton is the session toolbar's button labelled label.
func actionButton(label string) string {
	return fmt.Sprintf(`//div[contains(@class,"actions")]//button[text()=%q]`, label)
}

// checkAssets: the console's page names its assets by content hash; they come
// gzip-encoded and cached for a year.
func checkAssets(t *testing.T, base string) {
	t.Helper()
	get := func(path string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set("Accept-Encoding", "gzip") // set by hand: the transport leaves the body encoded
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	page, body := get("/console/")
	if page.Header.Get("Content-Encoding") != "gzip" || page.Header.Get("Cache-Control") != "no-cache" {
		t.Errorf("the console page: %v", page.Header)
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("the console page is not gzip: %v", err)
	}
	html, _ := io.ReadAll(zr)
	names := regexp.MustCompile(`"(app\.[0-9a-f]{8}\.(?:js|css))"`).FindAllStringSubmatch(string(html), -1)
	if len(names) != 2 {
		t.Fatalf("the console page names %d content-hashed assets, want 2:\n%s", len(names), html)
	}
	for _, n := range names {
		r, b := get("/console/" + n[1])
		if r.StatusCode != http.StatusOK || r.Header.Get("Content-Encoding") != "gzip" || r.Header.Get("Cache-Control") != "public, max-age=31536000, immutable" {
			t.Errorf("%s: %d %v", n[1], r.StatusCode, r.Header)
		}
		t.Logf("%s: %d bytes on the wire", n[1], len(b))
	}
}

// typeLine types a line into the console's terminal as a person's keyboard gives it to
// xterm.js (text input, then Enter).
func typeLine(line string) chromedp.Action {
	return chromedp.Tasks{
		chromedp.Focus(".xterm-helper-textarea", chromedp.ByQuery),
		chromedp.ActionFunc(func(ctx context.Context) error { return input.InsertText(line).Do(ctx) }),
		chromedp.KeyEvent(kb.Enter),
	}
}

// TestConsoleBrowser drives the console in a real Chromium against a real cws: sign in,
// see the session in the list, open it, browse to a file and read it (a denied file is
// not listed, the open file is marked, a long line scrolls in its own box), run `git
// status` in the terminal, watch a background process's output arrive, suspend and
// resume the session (the header and the Details tab agree, each button is enabled
// only where it applies, no usage zeros after the resume), renew, snapshot, fork and
// make a preview link through in-page dialogs (the port offered from the policy), see
// them all in the audit timeline, see the diff, delete the session; another tenant's
// session id shows not-found, a token without tools:exec sees no terminal, a suspended
// session's usage reads the same in every row. Every page fits a 390 px and a 1280 px
// screen. Screenshots of each page go to $CWS_ARTIFACTS/console.
func TestConsoleBrowser(t *testing.T) {
	requireRealDeps(t)
	chromium(t)
	fx := newFixture(t)
	pol := strings.Replace(vscodePolicy, `"maxSessions": 10`, `"maxSessions": 10, "previewPorts": ["8000-8099"]`, 1)
	pol = strings.Replace(pol, `"allowedCommands": [`, `"allowedCommands": ["bash", "stty", "sed", "clear", `, 1) // the terminal's shell and what it runs
	if err := os.WriteFile(filepath.Join(filepath.Dir(fx.path), "vscode.cws-policy.json"), []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startCWSWith(t, fx, testenv.Redis(t), freeAddr(t), lifecycleArgs("file://"+t.TempDir(), "--admin-tenant", tenantOpen, "--usage-every", "2s")...)
	t.Cleanup(func() { p.deleteAll(t, fx, tenantVSCode, tenantAcme) })
	checkAssets(t, p.url)
	tok := fx.token(t, tenantVSCode, "console", "")
	r := p.post(t, tok, "/v1/sessions", map[string]any{"labels": map[string]string{"app": "console"}})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decode[lifeView](t, r).ID
	c := connect(t, p.url+"/v1/sessions/"+id+"/mcp", tok, "")
	c.call(t, "writeFile", map[string]any{"path": "main.go", "contents": "package main\n\nfunc main() { println(\"hello from the console test\") }\n"})
	c.call(t, "writeFile", map[string]any{"path": "src/deep/long.go", "contents": "package deep\n\n// " + strings.Repeat("a long line ", 60) + "\n"})
	c.call(t, "runCommand", map[string]any{"command": "sh", "args": []string{"-c", "echo TOP_SECRET=hunter2 > .env"}}) // denied to the file tools
	c.call(t, "runCommand", map[string]any{"command": "git", "args": []string{"init", "-q", "-b", "main"}})
	c.call(t, "startProcess", map[string]any{"command": "sh", "args": []string{"-c", "for i in 1 2 3; do echo tick $i; sleep 1; done; echo ticks done"}})
	other := decode[lifeView](t, p.post(t, fx.token(t, tenantAcme, "other", ""), "/v1/sessions", map[string]any{})).ID

	ctx := browser(t, 1280, 900)
	signIn(t, ctx, p.url, tok)
	run(t, ctx, "the sessions list shows the session", waitText("table.sessions", id), waitText("table.sessions", "app=console"))
	noOverflow(t, ctx, "the sessions list")
	shot(t, ctx, "sessions")

	run(t, ctx, "open the session", chromedp.Click(fmt.Sprintf(`a[href="#/sessions/%s"]`, id), chromedp.ByQuery), waitState("ready"))
	noOverflow(t, ctx, "the session's details")
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
	if !evalBool(t, ctx, "the open file is marked", `document.querySelector("nav.files button[aria-current]")?.textContent === "main.go"`) {
		t.Errorf("the open file main.go is not marked aria-current in the list")
	}
	shot(t, ctx, "session-files")
	run(t, ctx, "read a file with a long line, two folders down",
		chromedp.Click(`//nav[contains(@class,"files")]//button[text()="src/"]`, chromedp.BySearch),
		waitText("nav.files", "deep/"),
		chromedp.Click(`//nav[contains(@class,"files")]//button[text()="deep/"]`, chromedp.BySearch),
		waitText("nav.files", "long.go"),
		chromedp.Click(`//nav[contains(@class,"files")]//button[text()="long.go"]`, chromedp.BySearch),
		waitText(".viewer", "a long line"),
	)
	if got := axName(t, ctx, `nav.files li:first-child button`); got != "Parent folder: /src" {
		t.Errorf("the up button's accessible name: %q", got)
	}
	noOverflow(t, ctx, "a file with a long line")
	run(t, ctx, "phone", chromedp.EmulateViewport(390, 844))
	if !evalBool(t, ctx, "the code box scrolls", `(() => { const p = document.querySelector(".viewer pre.code"); return p.scrollWidth > p.clientWidth && p.getBoundingClientRect().right <= document.documentElement.clientWidth; })()`) {
		t.Errorf("on a phone the long line does not scroll inside the code box")
	}
	shot(t, ctx, "phone-file")
	run(t, ctx, "laptop", chromedp.EmulateViewport(1280, 900))

	// The terminal is a real one: a shell on a PTY, typed into through xterm.js; its size
	// follows the window's.
	size := regexp.MustCompile(`SIZE=(\d+) (\d+)`)
	lastSize := func() string {
		var text string
		run(t, ctx, "read the terminal", chromedp.Text(".xterm-rows", &text, chromedp.ByQuery))
		m := size.FindAllString(text, -1)
		if len(m) == 0 {
			return ""
		}
		return m[len(m)-1]
	}
	run(t, ctx, "git status and stty size in the terminal",
		chromedp.Click(`nav.tabs a[href$="/terminal"]`, chromedp.ByQuery),
		chromedp.WaitVisible(".xterm-rows", chromedp.ByQuery),
		waitText("[role=status]", "Attached"),
		typeLine("git status"),
		waitText(".xterm-rows", "On branch main"),
		typeLine("stty size | sed 's/^/SIZE=/'"),
		waitText(".xterm-rows", "SIZE="),
	)
	wide := lastSize()
	if got := axName(t, ctx, ".xterm-helper-textarea"); got != "Terminal input" {
		t.Errorf("the terminal input's accessible name: %q, want Terminal input", got)
	}
	// The new size reaches the PTY once the page has laid the narrower window out and
	// sent the resize: ask until it shows, for up to 15 s.
	run(t, ctx, "a narrower window", chromedp.EmulateViewport(700, 900))
	narrow := wide
	for deadline := time.Now().Add(15 * time.Second); narrow == wide && time.Now().Before(deadline); {
		run(t, ctx, "ask stty size", typeLine("clear; stty size | sed 's/^/SIZE=/'"), chromedp.Sleep(500*time.Millisecond))
		if s := lastSize(); s != "" {
			narrow = s
		}
	}
	if narrow == wide {
		t.Errorf("stty size after the window narrowed: %q, before %q: the terminal did not follow the window", narrow, wide)
	}
	run(t, ctx, "laptop again", chromedp.EmulateViewport(1280, 900))
	noOverflow(t, ctx, "the terminal")
	shot(t, ctx, "session-terminal")

	run(t, ctx, "the background process's output arrives",
		chromedp.Click(`nav.tabs a[href$="/processes"]`, chromedp.ByQuery),
		waitText("pre.output", "tick 1"),
		waitText("pre.output", "ticks done"),
	)
	noOverflow(t, ctx, "the processes")
	shot(t, ctx, "session-processes")

	// One copy of the session on the page: after Suspend and Resume the header and the
	// Details tab agree, and each button is enabled only where it applies.
	run(t, ctx, "the details tab", chromedp.Click(`nav.tabs a[href$="/details"]`, chromedp.ByQuery), waitState("ready"))
	buttons := `[...document.querySelectorAll(".actions button")].filter((b) => b.disabled).map((b) => b.textContent).join(",")`
	var disabled string
	run(t, ctx, "the buttons of a ready session", chromedp.Evaluate(buttons, &disabled))
	if disabled != "Resume" {
		t.Errorf("a ready session's disabled buttons: %q, want Resume", disabled)
	}
	run(t, ctx, "suspend", chromedp.Click(actionButton("Suspend"), chromedp.BySearch), waitState("suspended"), chromedp.Evaluate(buttons, &disabled))
	if disabled != "Suspend" {
		t.Errorf("a suspended session's disabled buttons: %q, want Suspend", disabled)
	}
	shot(t, ctx, "session-suspended")
	var headText string
	run(t, ctx, "resume", chromedp.Click(actionButton("Resume"), chromedp.BySearch), waitState("ready"),
		chromedp.Text(".session-head", &headText, chromedp.ByQuery), chromedp.Evaluate(buttons, &disabled))
	if strings.Contains(headText, "mem 0 B") || strings.Contains(headText, " 0 procs") {
		t.Errorf("after Resume the header shows the sleep's zeros: %q", headText)
	}
	if disabled != "Resume" {
		t.Errorf("a resumed session's disabled buttons: %q, want Resume", disabled)
	}

	// The actions, through in-page dialogs.
	// Renew is idempotent: a click that lands while the actions re-render after the
	// resume (a loaded CI lost one) is made again.
	run(t, ctx, "renew", chromedp.ActionFunc(func(ctx context.Context) error {
		var err error
		for range 3 {
			tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			err = chromedp.Run(tctx, chromedp.Click(actionButton("Renew"), chromedp.BySearch), waitText(".actions + div", "Renew: done"))
			cancel()
			if err == nil {
				return nil
			}
		}
		return err
	}))
	run(t, ctx, "snapshot",
		chromedp.Click(actionButton("Snapshot"), chromedp.BySearch),
		chromedp.WaitVisible("dialog[open] #snap-name", chromedp.ByQuery),
		chromedp.SetValue("#snap-name", "console-snap", chromedp.ByID),
		chromedp.Click(`dialog[open] button[type="submit"]`, chromedp.ByQuery),
		waitText(".actions + div", "taken"),
	)
	run(t, ctx, "fork",
		chromedp.Click(actionButton("Fork"), chromedp.BySearch),
		chromedp.WaitVisible("dialog[open] #fork-count", chromedp.ByQuery),
		chromedp.Click(`dialog[open] button[type="submit"]`, chromedp.ByQuery),
		waitText(".actions + div", "forked: s-"),
	)
	var port, portHelp string
	run(t, ctx, "the preview link's dialog offers the policy's ports",
		chromedp.Click(actionButton("Preview link"), chromedp.BySearch),
		chromedp.WaitVisible("dialog[open] #link-port", chromedp.ByQuery),
		chromedp.Value("#link-port", &port, chromedp.ByID),
		chromedp.Text("#link-port-help", &portHelp, chromedp.ByID),
	)
	if port != "8000" || !strings.Contains(portHelp, "8000–8099") {
		t.Errorf("the preview link's dialog offers port %q (%q), want 8000 of 8000–8099", port, portHelp)
	}
	shot(t, ctx, "preview-dialog")
	run(t, ctx, "a port the policy refuses is refused in the dialog",
		chromedp.SetValue("#link-port", "3000", chromedp.ByID),
		chromedp.Click(`dialog[open] button[type="submit"]`, chromedp.ByQuery),
		waitText("dialog[open]", "8000–8099"),
		chromedp.SetValue("#link-port", "8000", chromedp.ByID),
		chromedp.Click(`dialog[open] button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(".link-box a.url", chromedp.ByQuery),
	)
	if !evalBool(t, ctx, "the link has a copy button", `!!document.querySelector(".link-box button") && document.querySelector(".link-box button").textContent === "Copy"`) {
		t.Errorf("the preview link has no Copy button")
	}
	noOverflow(t, ctx, "a preview link")
	shot(t, ctx, "preview-link")

	run(t, ctx, "the audit timeline shows the calls and the actions",
		chromedp.Click(`nav.tabs a[href$="/audit"]`, chromedp.ByQuery),
		waitText("table.audit", "readFile"),
		waitText("table.audit", "runCommand"),
		waitText("table.audit", `"git"`),
		waitText("table.audit", "session.suspend"),
		waitText("table.audit", "session.wake"),
		waitText("table.audit", "session.renew"),
		waitText("table.audit", "session.snapshot"),
		waitText("table.audit", "session.fork"),
	)
	noOverflow(t, ctx, "the audit timeline")
	shot(t, ctx, "session-audit")

	run(t, ctx, "the diff", chromedp.Click(`nav.tabs a[href$="/diff"]`, chromedp.ByQuery), waitText(".tab", "long.go"))
	noOverflow(t, ctx, "the diff")
	shot(t, ctx, "session-diff")

	run(t, ctx, "another tenant's session is not found",
		chromedp.Navigate(p.url+"/console/#/sessions/"+other),
		waitText("main", "Session not found"),
	)
	noOverflow(t, ctx, "a session not found")

	// A suspended session's usage reads the same in every row: no live figures.
	asleep := decode[lifeView](t, p.post(t, tok, "/v1/sessions", map[string]any{"labels": map[string]string{"app": "asleep"}})).ID
	if r := p.post(t, tok, "/v1/sessions/"+asleep+"/suspend", nil); r.status != http.StatusOK {
		t.Fatalf("suspend: %d %s", r.status, r.body)
	}
	var rows []string
	run(t, ctx, "the sessions list with a suspended session",
		chromedp.Navigate(p.url+"/console/#/sessions"),
		waitText("table.sessions", asleep),
		chromedp.Evaluate(`[...document.querySelectorAll("table.sessions tbody tr")].filter((r) => r.textContent.includes("suspended")).map((r) => r.querySelectorAll("td.num")[3].textContent)`, &rows), // age, idle, CPU, memory

	)
	for _, mem := range rows {
		if mem != "—" {
			t.Errorf("a suspended session's memory reads %q, want —", mem)
		}
	}
	if len(rows) == 0 {
		t.Errorf("no suspended row in the list")
	}

	run(t, ctx, "delete the session",
		chromedp.Navigate(p.url+"/console/#/sessions/"+id),
		waitState("ready"),
		chromedp.Click(actionButton("Delete"), chromedp.BySearch),
		chromedp.WaitVisible("dialog[open]", chromedp.ByQuery),
	)
	noOverflow(t, ctx, "the delete dialog")
	run(t, ctx, "confirm the delete", chromedp.Click(`dialog[open] button.danger`, chromedp.ByQuery), chromedp.WaitVisible("table.sessions", chromedp.ByQuery))
	if g := do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+id, tok, nil, nil); g.status != http.StatusNotFound {
		t.Errorf("after the console's delete: GET %d %s", g.status, g.body)
	}
	if n := ctx.Value(nativeDialogs{}).(*atomic.Int32).Load(); n != 0 {
		t.Errorf("the console opened %d native dialogs (prompt, confirm), want in-page ones", n)
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

	// The operator's view, and a phone-sized screen.
	adminTok, err := fx.tenants.Get(tenantOpen).Mint("operator", time.Hour, "", []string{auth.ScopeAdmin}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx3 := browser(t, 1280, 900)
	signIn(t, ctx3, p.url, adminTok)
	run(t, ctx3, "the admin sessions list spans tenants", waitText("table.sessions", second), waitText("table.sessions", other), waitText("table.sessions", tenantAcme))
	noOverflow(t, ctx3, "the admin sessions list")
	shot(t, ctx3, "admin-sessions")
	run(t, ctx3, "the admin overview", chromedp.Navigate(p.url+"/console/#/"), waitText("main", tenantVSCode), waitText("main", "calls/s"))
	noOverflow(t, ctx3, "the admin overview")
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
