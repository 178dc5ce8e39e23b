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

	"github.com/cwsdev/cws/auth"
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
	out, err := h.call(ctx, t, p, r.Header.Get(boundHeader), req.args, nil)
	var msg []byte
	if err != nil {
		msg, _ = jsonrpc.EncodeMessage(&jsonrpc.Response{ID: req.id, Error: err})
	} else {
		msg = encodeResult(req.id, out)
	}
	hdr := w.Header()
	hdr.Set("Cache-Control", "no-cache, no-transform")
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Connection", "keep-alive")
	ev := make([]byte, 0, len("event: message\ndata: \n\n")+len(msg))
	ev = append(ev, "event: message\ndata: "...)
	ev = append(ev, msg...)
	ev = append(ev, "\n\n"...)
	_, _ = w.Write(ev)
	_ = http.NewResponseController(w).Flush()
	h.leanServed.Add(1)
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

// parseLean parses a single tools/call request with nothing unusual in it.
func parseLean(body []byte) (leanRequest, bool) {
	var msg map[string]json.RawMessage
	if err := json.Unmarshal(body, &msg); err != nil || len(msg) != 4 {
		return leanRequest{}, false
	}
	if string(msg["jsonrpc"]) != `"2.0"` || string(msg["method"]) != `"tools/call"` {
		return leanRequest{}, false
	}
	id, ok := leanID(msg["id"])
	if !ok {
		return leanRequest{}, false
	}
	var params map[string]json.RawMessage
	if err := json.Unmarshal(msg["params"], &params); err != nil || len(params) == 0 {
		return leanRequest{}, false
	}
	for k := range params {
		if k != "name" && k != "arguments" {
			return leanRequest{}, false // _meta (progress tokens) and anything newer
		}
	}
	name := params["name"]
	if len(name) < 2 || name[0] != '"' || !plain(name[1:len(name)-1]) {
		return leanRequest{}, false
	}
	return leanRequest{id: id, name: string(name[1 : len(name)-1]), args: params["arguments"]}, true
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

// encodeResult writes the JSON-RPC response of a successful call as the SDK encodes
// an *sdk.CallToolResult: content, structuredContent, then isError when true.
func encodeResult(id jsonrpc.ID, out *callOutput) []byte {
	var idb []byte
	switch v := id.Raw().(type) {
	case string: // plain (leanID): it needs no escaping
		idb = append(append(append(idb, '"'), v...), '"')
	case int64:
		idb = strconv.AppendInt(idb, v, 10)
	}
	text, _ := json.Marshal(out.text)
	b := make([]byte, 0, 96+len(idb)+len(text)+len(out.structured)+len(out.note))
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, idb...)
	b = append(b, `,"result":{"content":[{"type":"text","text":`...)
	b = append(b, text...)
	b = append(b, '}')
	if out.note != "" {
		note, _ := json.Marshal(out.note)
		b = append(b, `,{"type":"text","text":`...)
		b = append(b, note...)
		b = append(b, '}')
	}
	b = append(b, `],"structuredContent":`...)
	b = append(b, out.structured...)
	if out.isError {
		b = append(b, `,"isError":true`...)
	}
	return append(b, "}}"...)
}
