package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cwsdev/cws/internal/testenv"
)

// wsViewer is one WebSocket attached to a terminal.
type wsViewer struct {
	t    *testing.T
	conn *websocket.Conn
	out  strings.Builder
	ctl  []map[string]any
}

func attachTerm(t *testing.T, base, token, session, tid, query string) (*wsViewer, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(base, "http") + "/v1/sessions/" + session + "/terminals/" + tid + "/attach" + query
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		return nil, resp, err
	}
	conn.SetReadLimit(4 << 20)
	t.Cleanup(func() { conn.CloseNow() })
	return &wsViewer{t: t, conn: conn}, resp, nil
}

// until reads until the output holds want, or a control frame "ctl:<type>" comes.
func (v *wsViewer) until(want string) map[string]any {
	v.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if !strings.HasPrefix(want, "ctl:") && strings.Contains(v.out.String(), want) {
			return nil
		}
		if m := v.next(want, deadline); m != nil && want == "ctl:"+fmt.Sprint(m["type"]) {
			return m
		}
	}
}

// untilAfter reads until the output from byte from on holds want.
func (v *wsViewer) untilAfter(from int, want string) {
	v.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(v.out.String()[from:], want) {
		v.next(want, deadline)
	}
}

// next reads one frame: output is added to v.out, a control frame kept and returned.
func (v *wsViewer) next(want string, deadline time.Time) map[string]any {
	v.t.Helper()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	typ, data, err := v.conn.Read(ctx)
	if err != nil {
		out := v.out.String()
		v.t.Fatalf("waiting for %q: %v; output so far (its last 2000 bytes) %q, control %v", want, err, out[max(0, len(out)-2000):], v.ctl)
	}
	if typ == websocket.MessageBinary {
		v.out.Write(data)
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		v.t.Fatalf("control frame not JSON: %s", data)
	}
	v.ctl = append(v.ctl, m)
	return m
}

// line reads until a whole line of output starts with prefix, and returns it.
func (v *wsViewer) line(prefix string) string {
	v.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := v.out.String()
		if i := strings.Index(out, "\r"+prefix); i >= 0 { // a line starts after \r\n, or \r after an escape
			if l, _, ok := strings.Cut(out[i+1:], "\r\n"); ok {
				return l
			}
		}
		v.next("a line starting "+strconv.Quote(prefix), deadline)
	}
}

func (v *wsViewer) typeIn(s string) {
	v.t.Helper()
	if err := v.conn.Write(context.Background(), websocket.MessageBinary, []byte(s)); err != nil {
		v.t.Fatal(err)
	}
}

func (v *wsViewer) control(s string) {
	v.t.Helper()
	if err := v.conn.Write(context.Background(), websocket.MessageText, []byte(s)); err != nil {
		v.t.Fatal(err)
	}
}

// TestTerminalsE2E: interactive terminals on the real workspace image through the REST
// API's WebSocket and the MCP tools, under a policy whose allowedCommands the kernel
// enforces: bash echoes, stty size follows a resize, a python3 REPL computes, ^C ends
// sleep and the shell lives, a program not allowed fails inside the terminal, a read -p
// prompt is answered with terminalSend, top's screen reads back as text, detach and
// re-attach replay the scrollback, a read-only viewer watches, another tenant gets 404,
// and a suspend ends the terminals with their screen kept; opening one wakes it.
func TestTerminalsE2E(t *testing.T) {
	requireRealDeps(t)
	fx := newFixture(t)
	p := startCWSWith(t, fx, testenv.Redis(t), freeAddr(t), lifecycleArgs("file://"+t.TempDir())...)
	t.Cleanup(func() { p.deleteAll(t, fx, tenantTerm) })
	tok := fx.token(t, tenantTerm, "term", "")
	r := p.post(t, tok, "/v1/sessions", nil)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decode[sessionView](t, r).ID

	r = p.post(t, tok, "/v1/sessions/"+id+"/terminals", map[string]any{"cols": 80, "rows": 24})
	if r.status != http.StatusCreated {
		t.Fatalf("open: %d %s", r.status, r.body)
	}
	term := decode[map[string]any](t, r)
	tid := fmt.Sprint(term["id"])
	if term["command"] != "bash" || term["pid"].(float64) <= 0 {
		t.Fatalf("opened: %s", r.body)
	}
	v, _, err := attachTerm(t, p.url, tok, id, tid, "")
	if err != nil {
		t.Fatal(err)
	}
	v.until("ctl:attached")
	v.typeIn("PS1='P> '; echo $((6*7)); stty size\r")
	v.until("42\r\n24 80\r\n")
	v.control(`{"type":"resize","cols":100,"rows":30}`)
	// A resize is applied before the input that follows it on the socket. Once CI on
	// the local cluster saw stty print the old size all the same, and bash never
	// redrew its prompt (no SIGWINCH came) in the 30 s after: as if that resize was
	// lost, though no error came back. Not reproduced in dozens of runs since; a miss
	// is logged and the resize sent again.
	for i := 0; ; i++ {
		mark := fmt.Sprintf("size%d", i)
		v.typeIn("echo " + mark + " $(stty size)\r")
		got := v.line(mark + " ")
		if got == mark+" 30 100" {
			break
		}
		if i == 2 {
			t.Fatalf("stty size after a resize to 100x30: %q", got)
		}
		t.Logf("stty size right after a resize to 100x30: %q; resizing and looking again", got)
		time.Sleep(200 * time.Millisecond)
		v.control(`{"type":"resize","cols":100,"rows":30}`)
	}
	// The MCP tools reach the same terminals.
	c := connect(t, p.url+"/v1/sessions/"+id+"/mcp?toolsets=terminal", tok, "")

	t.Run("python3 REPL", func(t *testing.T) {
		v.typeIn("python3 -q\r")
		v.until(">>> ")
		v.typeIn("6*7\r")
		v.until("\r\n42\r\n>>> ")
		from := v.out.Len()
		v.typeIn("\x04") // ^D ends it
		// The shell's prompt first: a program that restores the terminal as it exits may
		// flush input typed before (top does).
		v.untilAfter(from, "P> ")
		v.typeIn("echo back-in-bash\r")
		v.until("back-in-bash\r\n")
	})
	t.Run("Ctrl-C ends sleep, the shell lives", func(t *testing.T) {
		// The job prints its marker and becomes sleep: once the marker shows, sleep is
		// the foreground job.
		v.typeIn("sh -c 'echo go-sleep; exec sleep 100'\r")
		v.until("go-sleep\r\n")
		for i := 0; ; i++ {
			v.typeIn("\x03")
			if s := c.call(t, "terminalScreen", map[string]any{"id": tid, "waitFor": `^P>$`, "timeoutMs": 500}); s["matched"] == true {
				break
			}
			if i == 40 {
				t.Fatalf("^C never ended sleep: %q", v.out.String())
			}
		}
		v.typeIn("echo status-$?\r")
		v.until("status-130\r\n")
	})
	t.Run("a program not allowed fails inside the terminal", func(t *testing.T) {
		v.typeIn("id; echo id-status-$?\r")
		v.until("id-status-126\r\n")
		if !strings.Contains(v.out.String(), "Permission denied") {
			t.Errorf("no EACCES from id: %q", v.out.String())
		}
		v.typeIn("echo still-here\r")
		v.until("still-here\r\n")
	})
	t.Run("bad control frames", func(t *testing.T) {
		for _, frame := range []string{`nope`, `{"type":"resize","cols":0,"rows":2}`, `{"type":"warp"}`} {
			v.control(frame)
			if e := v.until("ctl:error"); e["error"].(map[string]any)["code"] != "invalid_params" {
				t.Errorf("%s: %v", frame, e)
			}
		}
		v.typeIn("echo lives-on\r")
		v.until("lives-on\r\n")
	})
	t.Run("two viewers, one read-only; detach and re-attach", func(t *testing.T) {
		ro, _, err := attachTerm(t, p.url, tok, id, tid, "?readonly=1")
		if err != nil {
			t.Fatal(err)
		}
		ro.until("ctl:attached")
		ro.until("lives-on\r\n") // the scrollback
		ro.typeIn("echo sneaky\r")
		ro.until("ctl:error")
		v.typeIn("echo both-see-$((3*3))\r")
		v.until("both-see-9\r\n")
		ro.until("both-see-9\r\n")
		v.conn.Close(websocket.StatusNormalClosure, "detach")
		back, _, err := attachTerm(t, p.url, tok, id, tid, "")
		if err != nil {
			t.Fatal(err)
		}
		back.until("42\r\n24 80\r\n") // from the start
		back.until("both-see-9\r\n")
		if strings.Contains(back.out.String(), "sneaky") {
			t.Error("the read-only viewer typed")
		}
		v = back
	})
	t.Run("another tenant's terminal is 404", func(t *testing.T) {
		other := fx.token(t, tenantOpen, "term", "")
		for _, m := range []string{http.MethodGet, http.MethodDelete} {
			if r := do(t, nil, p.url, m, "/v1/sessions/"+id+"/terminals/"+tid, other, nil, nil); r.status != http.StatusNotFound {
				t.Errorf("%s: %d %s", m, r.status, r.body)
			}
		}
		if _, resp, err := attachTerm(t, p.url, other, id, tid, ""); err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
			t.Errorf("attach: %v %v", resp, err)
		}
	})

	mt := c.call(t, "terminalOpen", map[string]any{"cols": 100, "rows": 30})
	mid := fmt.Sprint(mt["id"])
	t.Run("a read -p prompt answered with terminalSend", func(t *testing.T) {
		c.call(t, "terminalSend", map[string]any{"id": mid, "text": `read -p 'Proceed? [y/N] ' a; echo "answer=$a"`, "keys": []string{"Enter"}})
		if s := c.call(t, "terminalScreen", map[string]any{"id": mid, "waitFor": `Proceed\? \[y/N\]$`, "timeoutMs": 30000}); s["matched"] != true {
			t.Fatalf("no prompt: %v", s)
		}
		c.call(t, "terminalSend", map[string]any{"id": mid, "text": "y", "keys": []string{"Enter"}})
		if s := c.call(t, "terminalScreen", map[string]any{"id": mid, "waitFor": `^answer=y$`, "timeoutMs": 30000}); s["matched"] != true {
			t.Fatalf("no answer: %v", s)
		}
	})
	t.Run("top's screen as text", func(t *testing.T) {
		c.call(t, "terminalSend", map[string]any{"id": mid, "text": "PS1='M> '", "keys": []string{"Enter"}})
		if s := c.call(t, "terminalScreen", map[string]any{"id": mid, "waitFor": `^M>$`, "timeoutMs": 30000}); s["matched"] != true {
			t.Fatalf("no prompt: %v", s)
		}
		c.call(t, "terminalSend", map[string]any{"id": mid, "text": "top", "keys": []string{"Enter"}})
		s := c.call(t, "terminalScreen", map[string]any{"id": mid, "waitFor": `^\s*PID\s+USER`, "timeoutMs": 30000})
		lines, _ := s["lines"].([]any)
		if s["matched"] != true || len(lines) != 30 || !strings.HasPrefix(fmt.Sprint(lines[0]), "top - ") {
			t.Fatalf("top's screen: %v", s)
		}
		c.call(t, "terminalSend", map[string]any{"id": mid, "text": "q"})
		// top flushes the input it has not read as it restores the terminal (TCSAFLUSH):
		// what is typed before the shell's prompt is back may be dropped, as in any
		// terminal. CI on the cluster once lost "echo after-top" so.
		if s := c.call(t, "terminalScreen", map[string]any{"id": mid, "waitFor": `^M>$`, "timeoutMs": 30000}); s["matched"] != true {
			t.Fatalf("no prompt after q: %v", s)
		}
		c.call(t, "terminalSend", map[string]any{"id": mid, "text": "echo after-top", "keys": []string{"Enter"}})
		if s := c.call(t, "terminalScreen", map[string]any{"id": mid, "waitFor": `^after-top$`, "timeoutMs": 30000}); s["matched"] != true {
			t.Fatalf("after q: %v", s)
		}
	})
	t.Run("an unknown key name is invalid params", func(t *testing.T) {
		if e := rawToolCall(t, p.url+"/v1/sessions/"+id+"/mcp?toolsets=terminal", tok, "terminalSend", map[string]any{"id": mid, "keys": []string{"Hyper"}}); e == nil || e.Code != -32602 {
			t.Fatalf("unknown key: %+v", e)
		}
	})
	if l := c.call(t, "terminalList", map[string]any{}); len(l["terminals"].([]any)) != 2 {
		t.Fatalf("terminalList: %v", l)
	}

	t.Run("a suspend ends them, keeping the screen; a POST wakes the session", func(t *testing.T) {
		if r := p.post(t, tok, "/v1/sessions/"+id+"/suspend", nil); r.status != http.StatusOK {
			t.Fatalf("suspend: %d %s", r.status, r.body)
		}
		// Reading what the suspend kept does not wake the session.
		r := do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+id+"/terminals/"+tid, tok, nil, nil)
		if got := decode[map[string]any](t, r); r.status != 200 || got["endReason"] != "suspended" || got["running"] != false {
			t.Fatalf("GET after the suspend: %d %s", r.status, r.body)
		}
		r = do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+id+"/terminals", tok, nil, nil)
		if r.status != 200 || strings.Count(string(r.body), `"suspended"`) != 2 {
			t.Fatalf("list after the suspend: %d %s", r.status, r.body)
		}
		if st := decode[sessionView](t, do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+id, tok, nil, nil)).State; st != "suspended" {
			t.Fatalf("reading the kept terminals woke the session: %s", st)
		}
		s := c.call(t, "terminalScreen", map[string]any{"id": mid})
		if s["running"] != false || s["endReason"] != "suspended" || !strings.Contains(strings.Join(toStrings(s["lines"]), "\n"), "\nafter-top\n") {
			t.Fatalf("screen after the suspend: %v", s)
		}
		// An attach to it shows its last screen, then its end.
		kept, _, err := attachTerm(t, p.url, tok, id, tid, "")
		if err != nil {
			t.Fatal(err)
		}
		kept.until("both-see-9\r\n")
		if ex := kept.until("ctl:exit"); ex["endReason"] != "suspended" {
			t.Fatalf("exit frame of a terminal the suspend ended: %v", ex)
		}
		r = p.post(t, tok, "/v1/sessions/"+id+"/terminals", map[string]any{"command": "bash"})
		if r.status != http.StatusCreated {
			t.Fatalf("open after the suspend: %d %s", r.status, r.body)
		}
		nid := fmt.Sprint(decode[map[string]any](t, r)["id"])
		nv, _, err := attachTerm(t, p.url, tok, id, nid, "")
		if err != nil {
			t.Fatal(err)
		}
		nv.typeIn("echo awake\r")
		nv.until("awake\r\n")
	})
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, fmt.Sprint(x))
	}
	return out
}
