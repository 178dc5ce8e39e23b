package lsp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent"
)

// tool runs one mcpls tool within a call.
type tool func(ctx context.Context, c *call, args json.RawMessage) (any, error)

// tools are the 16 tools of seeds/mcpls-lsp-tools.md.
var tools = map[string]tool{
	"get_hover":               getHover,
	"get_definition":          getDefinition,
	"get_references":          getReferences,
	"get_completions":         getCompletions,
	"get_document_symbols":    getDocumentSymbols,
	"workspace_symbol_search": workspaceSymbolSearch,
	"get_diagnostics":         getDiagnostics,
	"get_cached_diagnostics":  getCachedDiagnostics,
	"format_document":         formatDocument,
	"rename_symbol":           renameSymbol,
	"get_code_actions":        getCodeActions,
	"prepare_call_hierarchy":  prepareCallHierarchy,
	"get_incoming_calls":      getIncomingCalls,
	"get_outgoing_calls":      getOutgoingCalls,
	"get_server_logs":         getServerLogs,
	"get_server_messages":     getServerMessages,
}

// wide are the tools that look across files: before them a configless project's files
// are opened (project.go).
var wide = map[string]bool{
	"get_references": true, "rename_symbol": true, "workspace_symbol_search": true,
	"prepare_call_hierarchy": true, "get_incoming_calls": true, "get_outgoing_calls": true,
}

// Tools lists the tool names, sorted.
func Tools() []string {
	out := make([]string, 0, len(tools))
	for n := range tools {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Run runs one tool with its seed arguments. It returns the result in the seed's shape
// and how many locations or edits were left out because the guard refuses their files.
// A server that exits during the call is started again and the call retried once.
func (m *Manager) Run(ctx context.Context, name string, args json.RawMessage, files Files) (json.RawMessage, int, error) {
	t, ok := tools[name]
	if !ok {
		return nil, 0, agent.Errorf(agent.CodeInvalid, "", "unknown LSP tool %q (tools: %s)", name, strings.Join(Tools(), ", "))
	}
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	for attempt := 0; ; attempt++ {
		c := &call{m: m, files: files, texts: map[string]*Text{}, denied: map[string]bool{}, wide: wide[name]}
		res, err := t(ctx, c, args)
		if c.s != nil {
			m.used(c.s.lang)
		}
		if errors.Is(err, errExited) && attempt == 0 && ctx.Err() == nil {
			continue
		}
		if err != nil {
			return nil, 0, wireError(err)
		}
		out, err := json.Marshal(res)
		if err != nil {
			return nil, 0, fmt.Errorf("encode %s result: %w", name, err)
		}
		return out, c.dropped, nil
	}
}

// wireError gives a server's refusal a code the host can map.
func wireError(err error) error {
	var se *serverError
	if !errors.As(err, &se) {
		if errors.Is(err, errExited) {
			return agent.Errorf(agent.CodeInternal, "", "%v; it is restarted on the next call (see get_server_logs)", err)
		}
		return err
	}
	code := agent.CodeInternal
	switch se.code {
	case -32602, -32600, -32803: // InvalidParams, InvalidRequest, RequestFailed
		code = agent.CodeInvalid
	case -32601: // MethodNotFound
		code = agent.CodeUnsupported
	case -32800: // RequestCancelled
		code = agent.CodeCanceled
	}
	return &agent.WireError{Code: code, Message: se.Error()}
}

// decodeArgs reads a tool's arguments, naming the tool in the error.
func decodeArgs(raw json.RawMessage, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return agent.Errorf(agent.CodeInvalid, "", "bad arguments: %v", err)
	}
	return nil
}

// fileArgs are the arguments of the tools on one file.
type fileArgs struct {
	FilePath string `json:"file_path"`
}

func (a fileArgs) rel() (string, error) {
	if a.FilePath == "" {
		return "", agent.Errorf(agent.CodeInvalid, "", "file_path is required")
	}
	return a.FilePath, nil
}

// posArgs are the arguments of the tools at one position.
type posArgs struct {
	fileArgs
	Line      *int `json:"line"`
	Character *int `json:"character"`
}

func (a posArgs) pos() (Pos, error) {
	if a.Line == nil || a.Character == nil {
		return Pos{}, agent.Errorf(agent.CodeInvalid, "", "line and character are required (1-based)")
	}
	return Pos{Line: *a.Line, Character: *a.Character}, nil
}

// at opens the file and converts the position: the start of every positional tool.
func (c *call) at(ctx context.Context, a posArgs) (string, Position, error) {
	rel, err := a.rel()
	if err != nil {
		return "", Position{}, err
	}
	p, err := a.pos()
	if err != nil {
		return "", Position{}, err
	}
	t, uri, err := c.open(ctx, rel)
	if err != nil {
		return "", Position{}, err
	}
	lp, err := t.ToLSP(p, c.s.enc)
	if err != nil {
		return "", Position{}, err
	}
	return uri, lp, nil
}

// textDocumentPosition is LSP's TextDocumentPositionParams.
func textDocumentPosition(uri string, p Position) map[string]any {
	return map[string]any{"textDocument": map[string]string{"uri": uri}, "position": p}
}

// Location is a location in a result: a display URI and an API range.
type Location struct {
	URI   string `json:"uri"`
	Range Span   `json:"range"`
}

// lspLocation is LSP's Location (or, with Target*, a LocationLink).
type lspLocation struct {
	URI                  string `json:"uri"`
	Range                Range  `json:"range"`
	TargetURI            string `json:"targetUri"`
	TargetSelectionRange *Range `json:"targetSelectionRange"`
}

// location converts one server location, or reports that it must be left out.
func (c *call) location(l lspLocation) (Location, bool) {
	uri, r := l.URI, l.Range
	if l.TargetURI != "" { // a LocationLink: the name it points at
		uri = l.TargetURI
		if l.TargetSelectionRange != nil {
			r = *l.TargetSelectionRange
		}
	}
	t, pl, ok := c.text(uri)
	if !ok {
		c.dropped++
		return Location{}, false
	}
	return Location{URI: pl.display, Range: c.span(t, r)}, true
}

// locations decodes Location | Location[] | LocationLink[] | null and converts them.
func (c *call) locations(raw json.RawMessage) []Location {
	var many []lspLocation
	if err := json.Unmarshal(raw, &many); err != nil {
		var one lspLocation
		if json.Unmarshal(raw, &one) == nil && (one.URI != "" || one.TargetURI != "") {
			many = []lspLocation{one}
		}
	}
	out := []Location{}
	for _, l := range many {
		if loc, ok := c.location(l); ok {
			out = append(out, loc)
		}
	}
	return out
}

// TextEdit is an edit in a result.
type TextEdit struct {
	Range   Span   `json:"range"`
	NewText string `json:"newText"`
}

type lspTextEdit struct {
	Range   Range  `json:"range"`
	NewText string `json:"newText"`
}

// WorkspaceEdit is a plan of edits by display URI.
type WorkspaceEdit struct {
	Changes map[string][]TextEdit `json:"changes"`
}

// workspaceEdit converts a server's WorkspaceEdit (changes or text documentChanges);
// edits to refused files are left out and counted. Creating, renaming or deleting files
// is not planned here.
func (c *call) workspaceEdit(raw json.RawMessage) (*WorkspaceEdit, error) {
	var we struct {
		Changes         map[string][]lspTextEdit `json:"changes"`
		DocumentChanges []struct {
			Kind         string `json:"kind"`
			TextDocument struct {
				URI string `json:"uri"`
			} `json:"textDocument"`
			Edits []lspTextEdit `json:"edits"`
		} `json:"documentChanges"`
	}
	if err := json.Unmarshal(raw, &we); err != nil {
		return nil, fmt.Errorf("%s: bad workspace edit: %w", c.s.name, err)
	}
	byURI := we.Changes
	if byURI == nil {
		byURI = map[string][]lspTextEdit{}
	}
	for _, dc := range we.DocumentChanges {
		if dc.Kind != "" {
			return nil, agent.Errorf(agent.CodeUnsupported, "", "%s planned a file %s, which cws does not plan through LSP", c.s.name, dc.Kind)
		}
		byURI[dc.TextDocument.URI] = append(byURI[dc.TextDocument.URI], dc.Edits...)
	}
	out := &WorkspaceEdit{Changes: map[string][]TextEdit{}}
	for uri, edits := range byURI {
		t, pl, ok := c.text(uri)
		if !ok {
			c.dropped += len(edits)
			continue
		}
		conv := make([]TextEdit, len(edits))
		for i, e := range edits {
			conv[i] = TextEdit{Range: c.span(t, e.Range), NewText: e.NewText}
		}
		out.Changes[pl.display] = append(out.Changes[pl.display], conv...)
	}
	return out, nil
}

// markup flattens hover and documentation contents (MarkupContent, MarkedString,
// MarkedString[], string) to one markdown string.
func markup(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var many []json.RawMessage
	if json.Unmarshal(raw, &many) == nil {
		parts := make([]string, 0, len(many))
		for _, m := range many {
			if p := markup(m); p != "" {
				parts = append(parts, p)
			}
		}
		return strings.Join(parts, "\n\n")
	}
	var obj struct {
		Kind     string `json:"kind"`
		Language string `json:"language"`
		Value    string `json:"value"`
	}
	if json.Unmarshal(raw, &obj) != nil {
		return ""
	}
	if obj.Language != "" {
		return "```" + obj.Language + "\n" + obj.Value + "\n```"
	}
	return obj.Value
}
