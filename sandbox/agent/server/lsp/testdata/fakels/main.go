// Command fakels is a tiny language server for the manager's tests. It speaks LSP over
// stdio and reports what it was told:
//   - hover answers a JSON object (as its markdown contents) with the document's version,
//     how many didOpen/didChange it got, the word at the position, and the answers the
//     client gave to the requests it sent after initialized;
//   - every line "loc PATH LINE CHAR" of the document is a location definition returns
//     (LINE and CHAR 0-based, in the negotiated encoding, a 3-unit range);
//   - every "ERR" in a document is an error diagnostic, published on each sync;
//   - lines "log:N text" and "show:N text" are sent as logMessage/showMessage of type N;
//   - hover also lists the documents open (base names, sorted), and references answers
//     one location per open document that mentions the word at the position.
//
// FAKE_ENC=utf-8 makes it take UTF-8 positions when offered; FAKE_PULL=1 makes it offer
// pull diagnostics.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sourcegraph/jsonrpc2"
)

type doc struct {
	text    string
	version int
}

type state struct {
	mu      sync.Mutex
	enc     string
	docs    map[string]*doc
	opens   int
	changes int
	answers map[string]json.RawMessage
	watched []string // "TYPE:basename" of each didChangeWatchedFiles event
	conn    *jsonrpc2.Conn
}

type stdio struct{}

func (stdio) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdio) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
func (stdio) Close() error                { return nil }

func main() {
	s := &state{enc: "utf-16", docs: map[string]*doc{}, answers: map[string]json.RawMessage{}}
	conn := jsonrpc2.NewConn(context.Background(), jsonrpc2.NewBufferedStream(stdio{}, jsonrpc2.VSCodeObjectCodec{}),
		ordered{jsonrpc2.HandlerWithError(s.handle)})
	s.conn = conn
	fmt.Fprintln(os.Stderr, "fakels: started")
	<-conn.DisconnectNotify()
}

// ordered handles notifications in order (a didOpen before the hover after it) and
// requests concurrently.
type ordered struct{ h jsonrpc2.Handler }

func (o ordered) Handle(ctx context.Context, c *jsonrpc2.Conn, r *jsonrpc2.Request) {
	if r.Notif {
		o.h.Handle(ctx, c, r)
		return
	}
	go o.h.Handle(ctx, c, r)
}

func (s *state) handle(ctx context.Context, c *jsonrpc2.Conn, req *jsonrpc2.Request) (any, error) {
	var params json.RawMessage
	if req.Params != nil {
		params = *req.Params
	}
	switch req.Method {
	case "initialize":
		var p struct {
			Capabilities struct {
				General struct {
					PositionEncodings []string `json:"positionEncodings"`
				} `json:"general"`
			} `json:"capabilities"`
		}
		_ = json.Unmarshal(params, &p)
		caps := map[string]any{"hoverProvider": true, "definitionProvider": true, "textDocumentSync": 1}
		for _, e := range p.Capabilities.General.PositionEncodings {
			if e == os.Getenv("FAKE_ENC") && e == "utf-8" {
				s.enc = "utf-8"
				caps["positionEncoding"] = "utf-8"
			}
		}
		if os.Getenv("FAKE_PULL") == "1" {
			caps["diagnosticProvider"] = map[string]any{"interFileDependencies": false, "workspaceDiagnostics": false}
		}
		return map[string]any{"capabilities": caps}, nil
	case "initialized":
		go s.askClient(c)
		return nil, nil
	case "shutdown":
		return nil, nil
	case "exit":
		os.Exit(0)
	case "textDocument/didOpen", "textDocument/didChange":
		var p struct {
			TextDocument struct {
				URI     string `json:"uri"`
				Text    string `json:"text"`
				Version int    `json:"version"`
			} `json:"textDocument"`
			ContentChanges []struct {
				Text string `json:"text"`
			} `json:"contentChanges"`
		}
		_ = json.Unmarshal(params, &p)
		s.mu.Lock()
		text := p.TextDocument.Text
		if req.Method == "textDocument/didOpen" {
			s.opens++
		} else {
			s.changes++
			text = p.ContentChanges[len(p.ContentChanges)-1].Text
		}
		s.docs[p.TextDocument.URI] = &doc{text: text, version: p.TextDocument.Version}
		s.mu.Unlock()
		s.announce(c, p.TextDocument.URI, text, p.TextDocument.Version)
		return nil, nil
	case "textDocument/didClose":
		s.mu.Lock()
		delete(s.docs, docURI(params))
		s.mu.Unlock()
		return nil, nil
	case "workspace/didChangeWatchedFiles":
		var p struct {
			Changes []struct {
				URI  string `json:"uri"`
				Type int    `json:"type"`
			} `json:"changes"`
		}
		_ = json.Unmarshal(params, &p)
		s.mu.Lock()
		for _, c := range p.Changes {
			s.watched = append(s.watched, fmt.Sprintf("%d:%s", c.Type, c.URI[strings.LastIndex(c.URI, "/")+1:]))
		}
		s.mu.Unlock()
		return nil, nil
	case "textDocument/hover":
		uri, line, char := position(params)
		s.mu.Lock()
		d := s.docs[uri]
		info := map[string]any{"opens": s.opens, "changes": s.changes, "answers": s.answers, "watched": s.watched, "open": s.openNames()}
		var rng any
		if d != nil {
			info["version"] = d.version
			l := lineOf(d.text, line)
			start, end := s.word(l, char)
			info["word"] = sliceUnits(l, start, end, s.enc)
			rng = map[string]any{"start": map[string]int{"line": line, "character": start}, "end": map[string]int{"line": line, "character": end}}
		}
		s.mu.Unlock()
		b, _ := json.Marshal(info)
		return map[string]any{"contents": map[string]string{"kind": "markdown", "value": string(b)}, "range": rng}, nil
	case "textDocument/definition":
		uri, _, _ := position(params)
		s.mu.Lock()
		d := s.docs[uri]
		s.mu.Unlock()
		root := strings.TrimSuffix(uri, "/"+uri[strings.LastIndex(uri, "/")+1:])
		locs := []any{}
		for _, l := range strings.Split(d.text, "\n") {
			f := strings.Fields(l)
			if len(f) == 4 && f[0] == "loc" {
				ln, _ := strconv.Atoi(f[2])
				ch, _ := strconv.Atoi(f[3])
				target := f[1]
				if !strings.HasPrefix(target, "/") {
					target = root + "/" + target
				} else {
					target = "file://" + target
				}
				locs = append(locs, map[string]any{"uri": target, "range": map[string]any{
					"start": map[string]int{"line": ln, "character": ch}, "end": map[string]int{"line": ln, "character": ch + 3}}})
			}
		}
		return locs, nil
	case "textDocument/references":
		uri, line, char := position(params)
		s.mu.Lock()
		defer s.mu.Unlock()
		d := s.docs[uri]
		if d == nil {
			return []any{}, nil
		}
		l := lineOf(d.text, line)
		start, end := s.word(l, char)
		word := sliceUnits(l, start, end, s.enc)
		locs := []any{}
		for u, o := range s.docs {
			if word != "" && strings.Contains(o.text, word) {
				locs = append(locs, map[string]any{"uri": u, "range": map[string]any{
					"start": map[string]int{"line": 0, "character": 0}, "end": map[string]int{"line": 0, "character": 0}}})
			}
		}
		return locs, nil
	case "textDocument/diagnostic":
		uri := docURI(params)
		s.mu.Lock()
		d := s.docs[uri]
		s.mu.Unlock()
		return map[string]any{"kind": "full", "items": s.diagnostics(d.text, "pull")}, nil
	}
	if req.Notif {
		return nil, nil
	}
	return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: req.Method}
}

// openNames lists the open documents' base names, sorted. Called with s.mu.
func (s *state) openNames() []string {
	out := []string{}
	for u := range s.docs {
		out = append(out, u[strings.LastIndex(u, "/")+1:])
	}
	sort.Strings(out)
	return out
}

// askClient sends the client the requests an editor must answer, and keeps the answers.
func (s *state) askClient(c *jsonrpc2.Conn) {
	asks := []struct {
		method string
		params any
	}{
		{"workspace/configuration", map[string]any{"items": []any{map[string]string{"section": "a"}, map[string]string{"section": "b"}}}},
		{"client/registerCapability", map[string]any{"registrations": []any{}}},
		{"window/workDoneProgress/create", map[string]any{"token": "t"}},
		{"workspace/workspaceFolders", nil},
		{"window/showMessageRequest", map[string]any{"type": 3, "message": "pick one", "actions": []any{map[string]string{"title": "x"}}}},
		{"workspace/applyEdit", map[string]any{"edit": map[string]any{"changes": map[string]any{}}}},
		{"fake/unknown", nil},
	}
	for _, a := range asks {
		var res json.RawMessage
		err := c.Call(context.Background(), a.method, a.params, &res)
		if err != nil {
			res, _ = json.Marshal(map[string]string{"error": err.Error()})
		}
		s.mu.Lock()
		s.answers[a.method] = res
		s.mu.Unlock()
	}
	_ = c.Notify(context.Background(), "window/logMessage", map[string]any{"type": 3, "message": "fakels ready"})
}

func (s *state) announce(c *jsonrpc2.Conn, uri, text string, version int) {
	for _, l := range strings.Split(text, "\n") {
		for _, kind := range []string{"log", "show"} {
			if rest, ok := strings.CutPrefix(l, kind+":"); ok {
				n, msg, _ := strings.Cut(rest, " ")
				t, _ := strconv.Atoi(n)
				method := "window/logMessage"
				if kind == "show" {
					method = "window/showMessage"
				}
				_ = c.Notify(context.Background(), method, map[string]any{"type": t, "message": msg})
			}
		}
	}
	_ = c.Notify(context.Background(), "textDocument/publishDiagnostics", map[string]any{"uri": uri, "version": version, "diagnostics": s.diagnostics(text, "push")})
}

func (s *state) diagnostics(text, source string) []any {
	out := []any{}
	for i, l := range strings.Split(text, "\n") {
		if j := strings.Index(l, "ERR"); j >= 0 {
			start := units(l[:j], s.enc)
			out = append(out, map[string]any{"range": map[string]any{"start": map[string]int{"line": i, "character": start},
				"end": map[string]int{"line": i, "character": start + 3}}, "severity": 1, "message": "found ERR", "source": source})
		}
	}
	return out
}

func position(params json.RawMessage) (string, int, int) {
	var p struct {
		TextDocument struct {
			URI string `json:"uri"`
		} `json:"textDocument"`
		Position struct {
			Line      int `json:"line"`
			Character int `json:"character"`
		} `json:"position"`
	}
	_ = json.Unmarshal(params, &p)
	return p.TextDocument.URI, p.Position.Line, p.Position.Character
}

func docURI(params json.RawMessage) string { u, _, _ := position(params); return u }

func lineOf(text string, n int) string {
	lines := strings.Split(text, "\n")
	if n >= len(lines) {
		return ""
	}
	return strings.TrimSuffix(lines[n], "\r")
}

func units(s, enc string) int {
	if enc == "utf-8" {
		return len(s)
	}
	return len(utf16.Encode([]rune(s)))
}

// word returns the unit range of the identifier at unit offset char.
func (s *state) word(line string, char int) (int, int) {
	type r struct {
		at, w int
		c     rune
	}
	var rs []r
	u := 0
	for _, c := range line {
		w := units(string(c), s.enc)
		rs = append(rs, r{u, w, c})
		u += w
	}
	isWord := func(c rune) bool {
		return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	i := 0
	for i < len(rs) && rs[i].at+rs[i].w <= char {
		i++
	}
	if i == len(rs) || !isWord(rs[i].c) {
		return char, char
	}
	a, b := i, i
	for a > 0 && isWord(rs[a-1].c) {
		a--
	}
	for b < len(rs) && isWord(rs[b].c) {
		b++
	}
	end := u
	if b < len(rs) {
		end = rs[b].at
	}
	return rs[a].at, end
}

func sliceUnits(line string, start, end int, enc string) string {
	var b strings.Builder
	u := 0
	for _, c := range line {
		if u >= start && u < end {
			b.WriteRune(c)
		}
		u += units(string(c), enc)
	}
	_ = utf8.RuneLen
	return b.String()
}
