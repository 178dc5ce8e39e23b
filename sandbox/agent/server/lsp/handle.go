package lsp

import (
	"context"
	"encoding/json"
	"time"

	"github.com/sourcegraph/jsonrpc2"
)

// handlerFunc adapts a function to jsonrpc2.Handler.
type handlerFunc func(context.Context, *jsonrpc2.Conn, *jsonrpc2.Request)

func (f handlerFunc) Handle(ctx context.Context, c *jsonrpc2.Conn, r *jsonrpc2.Request) { f(ctx, c, r) }

// dispatch takes what the server sends. Notifications are handled in order, on the
// connection's read loop; a request is answered from its own goroutine, so a server that
// is not reading its stdin while it writes can never deadlock the two of them.
func (s *server) dispatch(ctx context.Context, c *jsonrpc2.Conn, req *jsonrpc2.Request) {
	if req.Notif {
		s.notification(req.Method, params(req))
		return
	}
	go jsonrpc2.HandlerWithError(s.request).Handle(ctx, c, req)
}

func params(req *jsonrpc2.Request) json.RawMessage {
	if req.Params == nil {
		return nil
	}
	return *req.Params
}

// request answers a server's request as an editor with no UI and no edits of its own.
func (s *server) request(ctx context.Context, _ *jsonrpc2.Conn, req *jsonrpc2.Request) (any, error) {
	params := params(req)
	switch req.Method {
	case "workspace/configuration":
		// One null per item: "no settings", the server's defaults apply.
		var p struct {
			Items []json.RawMessage `json:"items"`
		}
		_ = json.Unmarshal(params, &p)
		return make([]any, len(p.Items)), nil
	case "client/registerCapability", "client/unregisterCapability", "window/workDoneProgress/create",
		"workspace/semanticTokens/refresh", "workspace/codeLens/refresh", "workspace/inlayHint/refresh",
		"workspace/inlineValue/refresh", "workspace/diagnostic/refresh", "workspace/foldingRange/refresh":
		return nil, nil
	case "workspace/workspaceFolders":
		return s.m.folders(), nil
	case "window/showMessageRequest":
		s.notification("window/showMessage", params) // keep it; nobody picks an action
		return nil, nil
	case "window/showDocument":
		return map[string]bool{"success": false}, nil
	case "workspace/applyEdit":
		return map[string]any{"applied": false, "failureReason": "cws returns edits as plans; it does not apply a server's edits"}, nil
	}
	return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "method not supported by cws-agent: " + req.Method}
}

func (s *server) notification(method string, params json.RawMessage) {
	switch method {
	case "textDocument/publishDiagnostics":
		var p struct {
			URI         string       `json:"uri"`
			Version     *int         `json:"version"`
			Diagnostics []diagnostic `json:"diagnostics"`
		}
		if json.Unmarshal(params, &p) != nil {
			return
		}
		s.mu.Lock()
		s.seq++
		s.diags[p.URI] = &published{version: p.Version, diags: p.Diagnostics, seq: s.seq}
		close(s.publish)
		s.publish = make(chan struct{})
		s.mu.Unlock()
	case "window/logMessage", "window/showMessage":
		var p struct {
			Type    int    `json:"type"`
			Message string `json:"message"`
		}
		if json.Unmarshal(params, &p) != nil {
			return
		}
		e := entry{Level: levelName(p.Type), Message: p.Message, Time: time.Now().UTC(), Server: s.name}
		if method == "window/logMessage" {
			s.m.logs.add(e)
		} else {
			s.m.messages.add(e)
		}
	}
}
