package lsp

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent"
)

// hover is get_hover's result.
type hover struct {
	Contents string `json:"contents"`
	Range    *Span  `json:"range,omitempty"`
}

func getHover(ctx context.Context, c *call, raw json.RawMessage) (any, error) {
	var a posArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	uri, p, err := c.at(ctx, a)
	if err != nil {
		return nil, err
	}
	var res *struct {
		Contents json.RawMessage `json:"contents"`
		Range    *Range          `json:"range"`
	}
	if err := c.s.call(ctx, "textDocument/hover", textDocumentPosition(uri, p), &res); err != nil {
		return nil, err
	}
	if res == nil {
		return nil, nil
	}
	h := &hover{Contents: markup(res.Contents)}
	if h.Contents == "" {
		return nil, nil
	}
	if res.Range != nil {
		sp := c.span(c.texts[uri], *res.Range)
		h.Range = &sp
	}
	return h, nil
}

func getDefinition(ctx context.Context, c *call, raw json.RawMessage) (any, error) {
	var a posArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	uri, p, err := c.at(ctx, a)
	if err != nil {
		return nil, err
	}
	var res json.RawMessage
	if err := c.s.call(ctx, "textDocument/definition", textDocumentPosition(uri, p), &res); err != nil {
		return nil, err
	}
	return c.locations(res), nil
}

func getReferences(ctx context.Context, c *call, raw json.RawMessage) (any, error) {
	var a struct {
		posArgs
		IncludeDeclaration bool `json:"include_declaration"`
	}
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	uri, p, err := c.at(ctx, a.posArgs)
	if err != nil {
		return nil, err
	}
	params := textDocumentPosition(uri, p)
	params["context"] = map[string]bool{"includeDeclaration": a.IncludeDeclaration}
	var res json.RawMessage
	if err := c.s.call(ctx, "textDocument/references", params, &res); err != nil {
		return nil, err
	}
	return c.locations(res), nil
}

// completion is one get_completions item.
type completion struct {
	Label         string `json:"label"`
	Kind          int    `json:"kind,omitempty"`
	Detail        string `json:"detail,omitempty"`
	Documentation string `json:"documentation,omitempty"`
	InsertText    string `json:"insertText,omitempty"`
}

func getCompletions(ctx context.Context, c *call, raw json.RawMessage) (any, error) {
	var a struct {
		posArgs
		Trigger *string `json:"trigger"`
	}
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	uri, p, err := c.at(ctx, a.posArgs)
	if err != nil {
		return nil, err
	}
	params := textDocumentPosition(uri, p)
	params["context"] = map[string]any{"triggerKind": 1} // Invoked
	if a.Trigger != nil && *a.Trigger != "" {
		// Only a single character is a trigger character in LSP ("->" triggers on ">").
		r := []rune(*a.Trigger)
		params["context"] = map[string]any{"triggerKind": 2, "triggerCharacter": string(r[len(r)-1])}
	}
	var res json.RawMessage
	if err := c.s.call(ctx, "textDocument/completion", params, &res); err != nil {
		return nil, err
	}
	type item struct {
		Label         string          `json:"label"`
		Kind          int             `json:"kind"`
		Detail        string          `json:"detail"`
		Documentation json.RawMessage `json:"documentation"`
		InsertText    string          `json:"insertText"`
		TextEdit      *struct {
			NewText string `json:"newText"`
		} `json:"textEdit"`
	}
	var items []item
	if err := json.Unmarshal(res, &items); err != nil {
		var list struct {
			Items []item `json:"items"`
		}
		_ = json.Unmarshal(res, &list)
		items = list.Items
	}
	out := make([]completion, 0, len(items))
	for _, it := range items {
		ins := it.InsertText
		if it.TextEdit != nil {
			ins = it.TextEdit.NewText
		}
		out = append(out, completion{Label: it.Label, Kind: it.Kind, Detail: it.Detail, Documentation: markup(it.Documentation), InsertText: ins})
	}
	return out, nil
}

// symbol is one get_document_symbols entry: hierarchical, with the name's range too.
type symbol struct {
	Name           string   `json:"name"`
	Kind           int      `json:"kind"`
	Detail         string   `json:"detail,omitempty"`
	Range          Span     `json:"range"`
	SelectionRange *Span    `json:"selectionRange,omitempty"`
	Children       []symbol `json:"children,omitempty"`
}

type lspSymbol struct {
	Name           string      `json:"name"`
	Kind           int         `json:"kind"`
	Detail         string      `json:"detail"`
	Range          *Range      `json:"range"`
	SelectionRange *Range      `json:"selectionRange"`
	Children       []lspSymbol `json:"children"`
	Location       *struct {   // SymbolInformation (flat)
		URI   string `json:"uri"`
		Range *Range `json:"range"`
	} `json:"location"`
	ContainerName string `json:"containerName"`
}

func getDocumentSymbols(ctx context.Context, c *call, raw json.RawMessage) (any, error) {
	var a fileArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	rel, err := a.rel()
	if err != nil {
		return nil, err
	}
	t, uri, err := c.open(ctx, rel)
	if err != nil {
		return nil, err
	}
	var res []lspSymbol
	if err := c.s.call(ctx, "textDocument/documentSymbol", map[string]any{"textDocument": map[string]string{"uri": uri}}, &res); err != nil {
		return nil, err
	}
	var conv func([]lspSymbol) []symbol
	conv = func(in []lspSymbol) []symbol {
		out := make([]symbol, 0, len(in))
		for _, s := range in {
			r := s.Range
			if r == nil && s.Location != nil {
				r = s.Location.Range
			}
			sym := symbol{Name: s.Name, Kind: s.Kind, Detail: s.Detail, Children: conv(s.Children)}
			if r != nil {
				sym.Range = c.span(t, *r)
			}
			if s.SelectionRange != nil {
				sp := c.span(t, *s.SelectionRange)
				sym.SelectionRange = &sp
			}
			if len(sym.Children) == 0 {
				sym.Children = nil
			}
			out = append(out, sym)
		}
		return out
	}
	return conv(res), nil
}

// symbolKinds maps kind_filter names to LSP SymbolKinds. "class" also matches structs
// (the seed's kind 5 is "Class/Struct") and "interface" traits.
var symbolKinds = map[string][]int{
	"file": {1}, "module": {2}, "namespace": {3}, "package": {4}, "class": {5, 23}, "method": {6},
	"property": {7}, "field": {8}, "constructor": {9}, "enum": {10}, "interface": {11}, "trait": {11},
	"function": {12}, "variable": {13}, "constant": {14}, "string": {15}, "number": {16},
	"boolean": {17}, "array": {18}, "object": {19}, "key": {20}, "null": {21},
	"enum_member": {22}, "struct": {23}, "event": {24}, "operator": {25}, "type_parameter": {26},
}

// workspaceSymbol is one workspace_symbol_search match.
type workspaceSymbol struct {
	Name          string   `json:"name"`
	Kind          int      `json:"kind"`
	Location      Location `json:"location"`
	ContainerName string   `json:"containerName,omitempty"`
}

func workspaceSymbolSearch(ctx context.Context, c *call, raw json.RawMessage) (any, error) {
	var a struct {
		Query      *string `json:"query"`
		KindFilter *string `json:"kind_filter"`
		Limit      *int    `json:"limit"`
		FilePath   string  `json:"file_path"`
	}
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if a.Query == nil {
		return nil, agent.Errorf(agent.CodeInvalid, "", "query is required")
	}
	limit := 100
	if a.Limit != nil {
		if *a.Limit < 1 {
			return nil, agent.Errorf(agent.CodeInvalid, "", "limit must be at least 1")
		}
		limit = *a.Limit
	}
	var kinds []int
	if a.KindFilter != nil && *a.KindFilter != "" {
		k := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(*a.KindFilter), " ", "_"))
		var ok bool
		if kinds, ok = symbolKinds[k]; !ok {
			names := make([]string, 0, len(symbolKinds))
			for n := range symbolKinds {
				names = append(names, n)
			}
			sort.Strings(names)
			return nil, agent.Errorf(agent.CodeInvalid, "", "unknown kind_filter %q (kinds: %s)", *a.KindFilter, strings.Join(names, ", "))
		}
	}
	servers, err := c.m.symbolServers(ctx, c, a.FilePath)
	if err != nil {
		return nil, err
	}
	out := []workspaceSymbol{}
	for _, s := range servers {
		c.s = s
		var res []lspSymbol
		if err := s.call(ctx, "workspace/symbol", map[string]string{"query": *a.Query}, &res); err != nil {
			return nil, err
		}
		for _, sym := range res {
			if len(out) >= limit {
				break
			}
			if kinds != nil && !containsInt(kinds, sym.Kind) || sym.Location == nil {
				continue
			}
			l := lspLocation{URI: sym.Location.URI}
			if sym.Location.Range != nil {
				l.Range = *sym.Location.Range
			}
			loc, ok := c.location(l)
			if !ok {
				continue
			}
			out = append(out, workspaceSymbol{Name: sym.Name, Kind: sym.Kind, Location: loc, ContainerName: sym.ContainerName})
		}
	}
	return out, nil
}

// symbolServers picks the servers a workspace-wide search asks: file_path's language if
// given; else every running server; else those of the languages whose marker files are
// at the workspace root.
func (m *Manager) symbolServers(ctx context.Context, c *call, file string) ([]*server, error) {
	if file != "" {
		if _, _, err := c.open(ctx, file); err != nil {
			return nil, err
		}
		return []*server{c.s}, nil
	}
	var out []*server
	for i := range m.cfg.Languages {
		if s := m.running(&m.cfg.Languages[i]); s != nil {
			out = append(out, s)
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	var markers []string
	for i := range m.cfg.Languages {
		lang := &m.cfg.Languages[i]
		markers = append(markers, lang.Markers...)
		if !m.hasMarker(lang) {
			continue
		}
		s, err := m.get(ctx, lang)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, agent.Errorf(agent.CodeUnsupported, "", "no language server is running and the workspace root has none of %s: pass file_path to pick a language", strings.Join(markers, ", "))
	}
	return out, nil
}

func (m *Manager) hasMarker(lang *Language) bool {
	for _, mk := range lang.Markers {
		if _, err := os.Lstat(filepath.Join(m.cfg.Root, mk)); err == nil {
			return true
		}
	}
	return false
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
