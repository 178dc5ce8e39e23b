package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/workspace"
	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The lean path answers the commonest request, one JSON-RPC tools/call in a POST,
// straight from the tool handler, with the bytes the SDK's stateless handler would
// write: the same headers, the same SSE event, the same result and error encoding.
// The SDK decodes a request three times with a decoder that allocates a large buffer
// each time and encodes the result twice more; the lean path reads the body once and
// writes the result once. Anything it is not sure of (another method, a batch, a
// notification, a progress token or any _meta, a protocol version of 2026-07-28 or
// later, an id that is not a plain integer or string, an unknown tool, a header the
// SDK would refuse) goes to the SDK unchanged. api/mcp's tests hold both paths to the
// same bytes.

// leanVersions are the protocol versions the lean path answers: those the SDK
// supports before 2026-07-28 (which changes the transport's rules).
var leanVersions = slices.DeleteFunc(sdk.SupportedProtocolVersions(), func(v string) bool { return v >= "2026-07-28" })

// leanRequest is a tools/call the lean path may answer.
type leanRequest struct {
	id   jsonrpc.ID
	name string
	args json.RawMessage
}

// lean serves r on the lean path and reports true, or reports false having written
// nothing; r's body is then whole again for the SDK.
func (h *Handler) lean(w http.ResponseWriter, r *http.Request) bool {
	if h.sdkOnly || r.Method != http.MethodPost || !leanHeaders(r) {
		return false
	}
	p := auth.PrincipalFromTokenInfo(mcpauth.TokenInfoFromContext(r.Context()))
	if p == nil {
		return false
	}
	body, ok := readBody(r)
	if !ok {
		return false
	}
	req, ok := parseLean(body)
	if !ok {
		return false
	}
	srv := h.serverFor(r, p)
	t, ok := srv.tools[req.name]
	if !ok {
		return false // the SDK answers unknown tools
	}
	// As on the SDK's path (protocol versions before 2026-07-28), the call runs to its
	// end even if the client goes away.
	ctx := context.WithoutCancel(r.Context())
	res, rerr := h.run(ctx, t, p, r.Header.Get(boundHeader), req.args, nil)
	ev := getBuf()
	defer putBuf(ev)
	*ev = append((*ev)[:0], "event: message\ndata: "...)
	if rerr == nil {
		var err error
		if *ev, err = appendResult(*ev, req.id, res); err != nil {
			rerr = rpcError(err)
		}
	}
	if rerr != nil {
		msg, _ := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: req.id, Error: rerr})
		*ev = append(append((*ev)[:len("event: message\ndata: ")], msg...), "\n\n"...)
	} else {
		*ev = append(*ev, "\n\n"...)
	}
	// The SDK's headers and body. The answer is whole, so it goes with its length and
	// in one Write, where the SDK, which may stream more events, chunks and flushes:
	// two writes to the socket instead of four for a 4 KiB read.
	hdr := w.Header()
	hdr.Set("Cache-Control", "no-cache, no-transform")
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Connection", "keep-alive")
	hdr.Set("Content-Length", strconv.Itoa(len(*ev)))
	h.leanServed.Add(1) // before the client can have the answer
	_, _ = w.Write(*ev)
	return true
}

// leanHeaders reports whether the request's headers are ones the SDK's stateless
// handler accepts for a POST and treats like any other.
func leanHeaders(r *http.Request) bool {
	if v := r.Header.Get("Mcp-Protocol-Version"); v != "" && !slices.Contains(leanVersions, v) {
		return false
	}
	if len(r.Header.Values("Last-Event-ID")) > 0 {
		return false
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return false
	}
	jsonOK, streamOK := false, false
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			switch strings.TrimSpace(mt) {
			case "application/json":
				jsonOK = true
			case "text/event-stream":
				streamOK = true
			}
		}
	}
	if !jsonOK || !streamOK {
		return false
	}
	// The SDK refuses a loopback listener reached under another host name (DNS
	// rebinding); leave every such request to it.
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && la != nil && loopback(la.String()) && !loopback(r.Host) {
		return false
	}
	return true
}

func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// maxLeanBody is the largest body the lean path reads; a larger one goes to the SDK,
// which applies its own limit (sdk.DefaultMaxRequestBodyBytes).
const maxLeanBody = 1 << 20

// readBody reads r's body, and puts it back for the SDK.
func readBody(r *http.Request) ([]byte, bool) {
	if r.Body == nil {
		return nil, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxLeanBody+1))
	rest := r.Body
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), rest), rest}
	return body, err == nil && len(body) <= maxLeanBody
}

// parseLean parses a single tools/call request with nothing unusual in it: an object
// of exactly jsonrpc "2.0", id, method "tools/call" and params, whose params has name
// (a plain string) and maybe arguments, and nothing else. A repeated member counts
// once, its last value (as json.Unmarshal into a map). It scans the body in place
// (json.Unmarshal into maps took 29 allocations); a key with an escape in it is left
// to the SDK.
func parseLean(body []byte) (leanRequest, bool) {
	if !json.Valid(body) {
		return leanRequest{}, false
	}
	var version, rawID, method, params []byte
	if !members(body, func(k, v []byte) bool {
		switch string(k) {
		case "jsonrpc":
			version = v
		case "id":
			rawID = v
		case "method":
			method = v
		case "params":
			params = v
		default:
			return false
		}
		return true
	}) || version == nil || rawID == nil || method == nil || params == nil {
		return leanRequest{}, false
	}
	if string(version) != `"2.0"` || string(method) != `"tools/call"` {
		return leanRequest{}, false
	}
	id, ok := leanID(rawID)
	if !ok {
		return leanRequest{}, false
	}
	var name, args []byte
	if !members(params, func(k, v []byte) bool {
		switch string(k) {
		case "name":
			name = v
		case "arguments":
			args = v
		default:
			return false // _meta (progress tokens) and anything newer
		}
		return true
	}) {
		return leanRequest{}, false
	}
	if len(name) < 2 || name[0] != '"' || !plain(name[1:len(name)-1]) {
		return leanRequest{}, false
	}
	return leanRequest{id: id, name: string(name[1 : len(name)-1]), args: args}, true
}

// members calls f with the key (unquoted) and the raw value of each member of the
// JSON object b, in order, until f returns false. b must be valid JSON (json.Valid).
// It reports false when b is not an object, a key has an escape, or f said so.
func members(b []byte, f func(key, value []byte) bool) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return true
	}
	for i < len(b) && b[i] == '"' {
		j := i + 1
		for j < len(b) && b[j] != '"' {
			if b[j] == '\\' {
				return false
			}
			j++
		}
		key := b[i+1 : j]
		i = skipSpace(b, j+1)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		end := skipValue(b, i)
		if end <= i || !f(key, b[i:end]) {
			return false
		}
		i = skipSpace(b, end)
		if i < len(b) && b[i] == '}' {
			return true
		}
		if i >= len(b) || b[i] != ',' {
			return false
		}
		i = skipSpace(b, i+1)
	}
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the JSON value that starts at b[i] (valid JSON).
func skipValue(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of the enclosing object
			}
			depth--
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
		if depth == 0 && i < len(b) && (b[i] == '"' || b[i] == '}' || b[i] == ']') {
			return i + 1
		}
	}
	return i
}

// leanID accepts the ids whose decoding cannot differ between decoders: a string of
// printable ASCII without escapes, or an integer of at most 15 digits.
func leanID(raw json.RawMessage) (jsonrpc.ID, bool) {
	switch {
	case len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' && plain(raw[1:len(raw)-1]):
		id, err := jsonrpc.MakeID(string(raw[1 : len(raw)-1]))
		return id, err == nil
	case len(raw) == 0 || len(raw) > 16:
		return jsonrpc.ID{}, false
	}
	digits := raw
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 1 && digits[0] == '0' {
		return jsonrpc.ID{}, false
	}
	n := 0.0
	for _, c := range digits {
		if c < '0' || c > '9' {
			return jsonrpc.ID{}, false
		}
		n = n*10 + float64(c-'0')
	}
	if raw[0] == '-' {
		n = -n
	}
	id, err := jsonrpc.MakeID(n)
	return id, err == nil
}

// plain reports whether s is printable ASCII without '"' or '\'.
func plain(s []byte) bool {
	for _, c := range s {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// appendResult appends the JSON-RPC response of a successful call as the SDK encodes
// an *sdk.CallToolResult (what call and the SDK path make of res): content,
// structuredContent, then isError when true. When the value cannot be encoded it
// returns json.Marshal's error, having appended nothing.
func appendResult(b []byte, id jsonrpc.ID, res *workspace.Result) ([]byte, error) {
	body := getBuf()
	defer putBuf(body)
	var err error
	if *body, err = appendJSON((*body)[:0], res.Value); err != nil {
		return b, err
	}
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	switch v := id.Raw().(type) {
	case string: // plain (leanID): it needs no escaping
		b = append(append(append(b, '"'), v...), '"')
	case int64:
		b = strconv.AppendInt(b, v, 10)
	}
	b = append(b, `,"result":{"content":[{"type":"text","text":`...)
	switch v := res.Value.(type) { // as Text
	case string:
		b = appendString(b, v)
	case *string:
		if v != nil {
			b = appendString(b, *v)
			break
		}
		b = appendString(b, *body)
	default:
		b = appendString(b, *body)
	}
	b = append(b, '}')
	if res.Note != "" {
		b = append(b, `,{"type":"text","text":`...)
		b = appendString(b, res.Note)
		b = append(b, '}')
	}
	b = append(b, `],"structuredContent":`...)
	if t := bytes.TrimSpace(*body); len(t) > 0 && t[0] == '{' { // as structured
		b = append(b, *body...)
	} else {
		b = append(append(append(b, `{"result":`...), *body...), '}')
	}
	if res.IsError {
		b = append(b, `,"isError":true`...)
	}
	return append(b, "}}"...), nil
}

// appendJSON appends v as json.Marshal encodes it, without Marshal's copy.
func appendJSON(b []byte, v any) ([]byte, error) {
	w := appender{b}
	if err := json.NewEncoder(&w).Encode(v); err != nil {
		return b, err
	}
	return w.b[:len(w.b)-1], nil // Encode adds a newline
}

type appender struct{ b []byte }

func (a *appender) Write(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}

// appendString appends s as a JSON string exactly as encoding/json encodes a string
// (json.Marshal: HTML-escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped),
// without Marshal's allocations. TestAppendString holds it to json.Marshal.
func appendString[S []byte | string](dst []byte, s S) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if htmlSafe[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		n := min(len(s)-i, utf8.UTFMax)
		r, size := utf8.DecodeRuneInString(string(s[i : i+n]))
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// htmlSafe holds the ASCII bytes encoding/json writes as they are in a string (with
// HTML escaping, as json.Marshal does).
var htmlSafe = func() (t [utf8.RuneSelf]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// bufs are the lean path's encoding buffers. A buffer grown past maxPooledBuf (a
// large file's read) is left to the GC rather than kept.
var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

const maxPooledBuf = 1 << 20

func getBuf() *[]byte { return bufs.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) <= maxPooledBuf {
		*b = (*b)[:0]
		bufs.Put(b)
	}
}
