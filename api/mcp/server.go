// Package mcp serves cws's tool catalogue over MCP (Streamable HTTP, the official
// go-sdk in stateless mode, so any replica answers any call), and maps the domain's
// errors to the seed's JSON-RPC codes in one table (errors.go).
package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/version"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/policy"
	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// boundHeader carries the URL's session id from the router to the tool handlers. The
// router sets it and strips any a client sent.
const boundHeader = "X-Cws-Bound-Session"

// Config configures the MCP endpoints.
type Config struct {
	Service  *workspace.Service
	Verifier *auth.Verifier
	Tenants  workspace.Tenants
	Log      *slog.Logger
	// ResourceMetadataURL is advertised in 401s (RFC 9728).
	ResourceMetadataURL string
	// OnAuthFailure counts rejected tokens by reason (metrics).
	OnAuthFailure func(reason string)
	// OnCallFailed counts tool calls answered with a JSON-RPC error, by code (metrics).
	OnCallFailed func(code string)
	// SDKOnly serves every request through the go-sdk, never on the lean tools/call
	// path (lean.go): tests compare the two.
	SDKOnly bool
}

// Handler serves /mcp and /v1/sessions/{id}/mcp.
type Handler struct {
	cfg     Config
	log     *slog.Logger
	sdkOnly bool
	// leanServed counts the requests the lean path answered (tests).
	leanServed atomic.Int64
	servers    sync.Map // serverKey → *server
	http       http.Handler
}

type serverKey struct{ tenant, toolsets string }

// server is the MCP server of one tenant and set of toolsets, with the tools it lists
// by name (the lean path answers those alone).
type server struct {
	sdk   *sdk.Server
	tools map[string]*workspace.Tool
}

// New returns the MCP handler.
func New(cfg Config) *Handler {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.OnAuthFailure == nil {
		cfg.OnAuthFailure = func(string) {}
	}
	if cfg.OnCallFailed == nil {
		cfg.OnCallFailed = func(string) {}
	}
	h := &Handler{cfg: cfg, log: cfg.Log.With("component", "api/mcp"), sdkOnly: cfg.SDKOnly}
	sdkHandler := sdk.NewStreamableHTTPHandler(h.server, &sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: false, Logger: h.log})
	stream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.lean(w, r) {
			sdkHandler.ServeHTTP(w, r)
		}
	})
	verify := cfg.Verifier.TokenVerifier()
	counted := func(ctx context.Context, tok string, r *http.Request) (*mcpauth.TokenInfo, error) {
		ti, err := verify(ctx, tok, r)
		if err != nil {
			cfg.OnAuthFailure(auth.ReasonOf(err))
		}
		return ti, err
	}
	authed := mcpauth.RequireBearerToken(counted, &mcpauth.RequireBearerTokenOptions{ResourceMetadataURL: cfg.ResourceMetadataURL})(stream)
	h.http = http.NewCrossOriginProtection().Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := auth.BearerToken(r); !ok {
			cfg.OnAuthFailure("missing_token")
		}
		authed.ServeHTTP(w, r)
	}))
	return h
}

// ServeHTTP serves /mcp: the caller's session comes from the token's session claim,
// else the caller's default session.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r.Header.Del(boundHeader)
	h.http.ServeHTTP(w, r)
}

// ServeBound serves /v1/sessions/{id}/mcp: every call goes to session id. The caller
// has already checked that the session is the caller's.
func (h *Handler) ServeBound(w http.ResponseWriter, r *http.Request, id string) {
	r.Header.Set(boundHeader, id)
	h.http.ServeHTTP(w, r)
}

// toolsets reads ?toolsets=core,vscode,lsp (default core), narrowed to the tenant's.
func toolsets(r *http.Request, tp *policy.Policy) []string {
	want := []string{policy.ToolsetCore}
	if q := r.URL.Query().Get("toolsets"); q != "" {
		want = strings.Split(q, ",")
	}
	enabled := policy.AllToolsets
	if tp != nil {
		enabled = tp.EnabledToolsets()
	}
	var out []string
	for _, t := range want {
		t = strings.TrimSpace(t)
		if slices.Contains(enabled, t) && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// toolsetEnabled reports whether the tenant's policy tp (nil: none) enables toolset,
// as toolsets decides it.
func toolsetEnabled(tp *policy.Policy, toolset string) bool {
	if tp == nil || tp.Toolsets == nil {
		return slices.Contains(policy.AllToolsets, toolset)
	}
	return slices.Contains(tp.Toolsets, toolset)
}

// server returns the cached *sdk.Server for the caller's tenant and toolsets.
func (h *Handler) server(r *http.Request) *sdk.Server {
	p := auth.PrincipalFromTokenInfo(mcpauth.TokenInfoFromContext(r.Context()))
	if p == nil {
		return nil
	}
	return h.serverFor(r, p).sdk
}

// serverFor returns the cached server for p's tenant and the request's toolsets.
func (h *Handler) serverFor(r *http.Request, p *auth.Principal) *server {
	tp, _ := h.cfg.Tenants.Policy(p.Tenant)
	var sets []string
	key := serverKey{tenant: p.Tenant}
	if r.URL.RawQuery == "" { // toolsets(r, tp), without its allocations: core, if enabled
		if toolsetEnabled(tp, policy.ToolsetCore) {
			key.toolsets = policy.ToolsetCore
		}
	} else {
		sets = toolsets(r, tp)
		key.toolsets = strings.Join(sets, ",")
	}
	if s, ok := h.servers.Load(key); ok {
		return s.(*server)
	}
	if sets == nil {
		sets = toolsets(r, tp)
	}
	s := &server{sdk: sdk.NewServer(&sdk.Implementation{Name: "cws", Title: "cws — Coding Workspace Service", Version: version.Version},
		&sdk.ServerOptions{Capabilities: &sdk.ServerCapabilities{}, Instructions: instructions}), tools: map[string]*workspace.Tool{}}
	for _, t := range h.cfg.Service.Catalog().Tools(sets...) {
		s.sdk.AddTool(mcpTool(t), h.handle(t))
		s.tools[t.Name] = t
	}
	s.sdk.AddReceivingMiddleware(h.listCallable)
	actual, _ := h.servers.LoadOrStore(key, s)
	return actual.(*server)
}

const instructions = "cws gives you a sandboxed workspace at /workspace. Paths are relative to it. " +
	"Commands run without a shell; put arguments in args. Errors carry JSON-RPC codes: -32001 path traversal, " +
	"-32002 policy violation, -32003 too large, -32004 command not allowed, -32005 confirmation required (retry with options.confirmed: true)."

func mcpTool(t *workspace.Tool) *sdk.Tool {
	ro, destr, idem, open := t.Annotations.ReadOnly, t.Annotations.Destructive, t.Annotations.Idempotent, t.Annotations.OpenWorld
	return &sdk.Tool{
		Name: t.Name, Title: t.Title, Description: t.Description,
		InputSchema: t.InputSchema, OutputSchema: t.OutputSchema,
		Annotations: &sdk.ToolAnnotations{Title: t.Title, ReadOnlyHint: ro, DestructiveHint: &destr, IdempotentHint: idem, OpenWorldHint: &open},
	}
}

// handle runs one tool call through the Service for the SDK.
func (h *Handler) handle(t *workspace.Tool) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		p := auth.PrincipalFromTokenInfo(req.Extra.TokenInfo)
		var onOutput workspace.OutputFunc
		if tok := req.Params.GetProgressToken(); tok != nil && t.Streams {
			var mu sync.Mutex
			n := 0.0
			onOutput = func(stream string, data []byte) {
				mu.Lock()
				n++
				msg := &sdk.ProgressNotificationParams{ProgressToken: tok, Progress: n, Message: stream + ": " + string(data)}
				mu.Unlock()
				if err := req.Session.NotifyProgress(ctx, msg); err != nil {
					h.log.Debug("progress not delivered", "err", err)
				}
			}
		}
		out, rerr := h.call(ctx, t, p, req.Extra.Header.Get(boundHeader), req.Params.Arguments, onOutput)
		if rerr != nil {
			return nil, rerr
		}
		res := &sdk.CallToolResult{
			Content:           []sdk.Content{&sdk.TextContent{Text: out.text}},
			StructuredContent: out.structured,
			IsError:           out.isError,
		}
		if out.note != "" {
			res.Content = append(res.Content, &sdk.TextContent{Text: out.note})
		}
		return res, nil
	}
}

// callOutput is a successful call's result, encoded once: the text content, the
// structured content and the note.
type callOutput struct {
	text       string
	structured json.RawMessage
	note       string
	isError    bool
}

// call runs one tool call of p through the Service; bound is the URL's session id
// (boundHeader), "" on /mcp.
func (h *Handler) call(ctx context.Context, t *workspace.Tool, p *auth.Principal, bound string, args json.RawMessage, onOutput workspace.OutputFunc) (*callOutput, *jsonrpc.Error) {
	res, rerr := h.run(ctx, t, p, bound, args, onOutput)
	if rerr != nil {
		return nil, rerr
	}
	body, err := json.Marshal(res.Value)
	if err != nil {
		return nil, rpcError(err)
	}
	return &callOutput{text: Text(res.Value, body), structured: structured(body), note: res.Note, isError: res.IsError}, nil
}

// run is call's part in the Service: the result, not yet encoded.
func (h *Handler) run(ctx context.Context, t *workspace.Tool, p *auth.Principal, bound string, args json.RawMessage, onOutput workspace.OutputFunc) (*workspace.Result, *jsonrpc.Error) {
	start := time.Now()
	if p == nil {
		return nil, h.failed(ctx, "", "", t.Name, start, workspace.ErrForbidden)
	}
	caller := workspace.CallerOf(p)
	id, err := sessionID(bound, p)
	if err != nil {
		return nil, h.failed(ctx, p.Tenant, id, t.Name, start, err)
	}
	opts := workspace.CallOptions{OnOutput: onOutput}
	var res *workspace.Result
	if id == "" {
		res, err = h.cfg.Service.CallDefault(ctx, caller, t.Name, args, opts)
	} else {
		res, err = h.cfg.Service.Call(ctx, caller, id, t.Name, args, opts)
	}
	if err != nil {
		return nil, h.failed(ctx, p.Tenant, id, t.Name, start, err)
	}
	return res, nil
}

// sessionID picks the call's session: the URL's, else the token's session claim, else
// "" for the caller's default session (created on first use). A token bound to one
// session cannot reach another.
func sessionID(bound string, p *auth.Principal) (string, error) {
	switch {
	case bound != "" && p.Session != "" && bound != p.Session:
		return "", workspace.ErrNotFound
	case bound != "":
		return bound, nil
	}
	return p.Session, nil
}

// listCallable narrows tools/list to the tools the caller's token may call: a token
// with tools:read alone sees the read-only tools. The others stay registered, so a call
// to one is refused by the Service like any other (-32002, data.scope), not reported as
// an unknown tool.
func (h *Handler) listCallable(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		res, err := next(ctx, method, req)
		lr, ok := res.(*sdk.ListToolsResult)
		if err != nil || !ok {
			return res, err
		}
		caller := workspace.CallerOf(auth.PrincipalFromTokenInfo(req.GetExtra().TokenInfo))
		cat := h.cfg.Service.Catalog()
		out := *lr
		out.Tools = slices.DeleteFunc(slices.Clone(lr.Tools), func(mt *sdk.Tool) bool {
			t, ok := cat.Lookup(mt.Name)
			return !ok || !caller.May(t)
		})
		return &out, nil
	}
}

// structured is a result's structuredContent: the result itself when it is a JSON
// object, else {"result": …} (MCP's structured content is an object; an LSP definition
// is an array, a hover may be null).
func structured(body []byte) json.RawMessage {
	if b := bytes.TrimSpace(body); len(b) > 0 && b[0] == '{' {
		return body
	}
	return json.RawMessage(`{"result":` + string(body) + `}`)
}

// Text is a result's text content: a string result as it is (the vscode toolset's "ok",
// a file's text, a diff), anything else as its JSON (body). It is exactly what the
// legacy REST envelope's status carries.
func Text(v any, body []byte) string {
	switch s := v.(type) {
	case string:
		return s
	case *string:
		if s != nil {
			return *s
		}
	}
	return string(body)
}
