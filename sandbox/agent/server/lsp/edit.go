package lsp

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
)

// diagnostic is a server's Diagnostic: the fields results show, and the whole object as
// the server sent it (code actions get it back unchanged as context).
type diagnostic struct {
	Range    Range           `json:"range"`
	Severity int             `json:"severity,omitempty"`
	Code     json.RawMessage `json:"code,omitempty"`
	Source   string          `json:"source,omitempty"`
	Message  string          `json:"message"`
	raw      json.RawMessage
}

func (d *diagnostic) UnmarshalJSON(b []byte) error {
	type plain diagnostic
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*d = diagnostic(p)
	d.raw = append(json.RawMessage(nil), b...)
	return nil
}

func (d diagnostic) MarshalJSON() ([]byte, error) { return d.raw, nil }

// Diagnostic is one get_diagnostics entry.
type Diagnostic struct {
	Range    Span            `json:"range"`
	Severity int             `json:"severity,omitempty"`
	Message  string          `json:"message"`
	Source   string          `json:"source,omitempty"`
	Code     json.RawMessage `json:"code,omitempty"`
}

// quiet is how long get_diagnostics keeps listening after a publish for the synced
// text, in case the server follows a quick pass (syntax) with a slower one (types).
const quiet = 300 * time.Millisecond

// getDiagnostics pulls diagnostics (textDocument/diagnostic) where the server offers it.
// Otherwise it syncs the file and waits for the server to publish for the synced text:
// the first publishDiagnostics for the file after the sync (with a version, at least the
// synced one) and after the last change reported to it of a file it did not have open,
// then quiet for a follow-up, all within Config.DiagnosticsWait; after that
// it answers with the last publish it has, if any.
func getDiagnostics(ctx context.Context, c *call, raw json.RawMessage) (any, error) {
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
	var diags []diagnostic
	if c.s.caps.pullDiagnostics() {
		var res struct {
			Kind  string       `json:"kind"`
			Items []diagnostic `json:"items"`
		}
		if err := c.s.call(ctx, "textDocument/diagnostic", map[string]any{"textDocument": map[string]string{"uri": uri}}, &res); err != nil {
			return nil, err
		}
		diags = res.Items
	} else if diags, err = c.s.waitPublished(ctx, uri, c.m.cfg.DiagnosticsWait); err != nil {
		return nil, err
	}
	out := make([]Diagnostic, 0, len(diags))
	for _, d := range diags {
		out = append(out, Diagnostic{Range: c.span(t, d.Range), Severity: d.Severity, Message: d.Message, Source: d.Source, Code: d.Code})
	}
	return out, nil
}

// waitPublished waits for a publish for uri's synced text (see getDiagnostics).
func (s *server) waitPublished(ctx context.Context, uri string, wait time.Duration) ([]diagnostic, error) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	var settled <-chan time.Time
	for {
		s.mu.Lock()
		d, p, ch, watched := s.docs[uri], s.diags[uri], s.publish, s.watchSeq
		s.mu.Unlock()
		fresh := d != nil && p != nil && p.seq > max(d.seq, watched) && (p.version == nil || *p.version >= d.version)
		if fresh && settled == nil {
			settled = time.After(quiet)
		}
		select {
		case <-ch:
			continue
		case <-settled:
		case <-deadline.C:
		case <-s.done:
			return nil, errExited
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if p == nil {
			return nil, nil
		}
		return p.diags, nil
	}
}

// cachedDiagnostic is one get_cached_diagnostics entry, with the severity by name.
type cachedDiagnostic struct {
	Message  string          `json:"message"`
	Severity string          `json:"severity,omitempty"`
	Range    Span            `json:"range"`
	Source   string          `json:"source,omitempty"`
	Code     json.RawMessage `json:"code,omitempty"`
}

var severities = map[int]string{1: "error", 2: "warning", 3: "info", 4: "hint"}

// getCachedDiagnostics answers from what the server last pushed, without syncing or
// waiting, and without starting a server.
func getCachedDiagnostics(ctx context.Context, c *call, raw json.RawMessage) (any, error) {
	var a fileArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	rel, err := a.rel()
	if err != nil {
		return nil, err
	}
	lang, _, err := c.m.languageOf(rel)
	if err != nil {
		return nil, err
	}
	src, err := c.files.Read(rel) // the guard applies, and the text converts positions
	if err != nil {
		return nil, err
	}
	out := struct {
		FilePath    string             `json:"file_path"`
		Diagnostics []cachedDiagnostic `json:"diagnostics"`
	}{FilePath: a.FilePath, Diagnostics: []cachedDiagnostic{}}
	if c.s = c.m.running(lang); c.s == nil {
		return out, nil
	}
	t := NewText(src)
	c.s.mu.Lock()
	p := c.s.diags[c.m.serverURI(rel)]
	c.s.mu.Unlock()
	if p != nil {
		for _, d := range p.diags {
			out.Diagnostics = append(out.Diagnostics, cachedDiagnostic{Message: d.Message, Severity: severities[d.Severity], Range: c.span(t, d.Range), Source: d.Source, Code: d.Code})
		}
	}
	return out, nil
}

func formatDocument(ctx context.Context, c *call, raw json.RawMessage) (any, error) {
	var a struct {
		fileArgs
		TabSize      *int  `json:"tab_size"`
		InsertSpaces *bool `json:"insert_spaces"`
	}
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	rel, err := a.rel()
	if err != nil {
		return nil, err
	}
	opts := map[string]any{"tabSize": 4, "insertSpaces": true}
	if a.TabSize != nil {
		if *a.TabSize < 1 {
			return nil, agent.Errorf(agent.CodeInvalid, "", "tab_size must be at least 1")
		}
		opts["tabSize"] = *a.TabSize
	}
	if a.InsertSpaces != nil {
		opts["insertSpaces"] = *a.InsertSpaces
	}
	t, uri, err := c.open(ctx, rel)
	if err != nil {
		return nil, err
	}
	var edits []lspTextEdit
	if err := c.s.call(ctx, "textDocument/formatting", map[string]any{"textDocument": map[string]string{"uri": uri}, "options": opts}, &edits); err != nil {
		return nil, err
	}
	out := make([]TextEdit, 0, len(edits))
	for _, e := range edits {
		out = append(out, TextEdit{Range: c.span(t, e.Range), NewText: e.NewText})
	}
	return out, nil
}

func renameSymbol(ctx context.Context, c *call, raw json.RawMessage) (any, error) {
	var a struct {
		posArgs
		NewName string `json:"new_name"`
	}
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if a.NewName == "" {
		return nil, agent.Errorf(agent.CodeInvalid, "", "new_name is required")
	}
	uri, p, err := c.at(ctx, a.posArgs)
	if err != nil {
		return nil, err
	}
	params := textDocumentPosition(uri, p)
	params["newName"] = a.NewName
	var res json.RawMessage
	if err := c.s.call(ctx, "textDocument/rename", params, &res); err != nil {
		return nil, err
	}
	if len(res) == 0 || string(res) == "null" {
		return WorkspaceEdit{Changes: map[string][]TextEdit{}}, nil
	}
	return c.workspaceEdit(res)
}

// codeAction is one get_code_actions entry: a CodeAction with its edit as a plan, or a
// bare command.
type codeAction struct {
	Title       string          `json:"title"`
	Kind        string          `json:"kind,omitempty"`
	IsPreferred bool            `json:"isPreferred,omitempty"`
	Disabled    json.RawMessage `json:"disabled,omitempty"`
	Edit        *WorkspaceEdit  `json:"edit,omitempty"`
	Command     json.RawMessage `json:"command,omitempty"`
}

func getCodeActions(ctx context.Context, c *call, raw json.RawMessage) (any, error) {
	var a struct {
		fileArgs
		StartLine      *int    `json:"start_line"`
		StartCharacter *int    `json:"start_character"`
		EndLine        *int    `json:"end_line"`
		EndCharacter   *int    `json:"end_character"`
		KindFilter     *string `json:"kind_filter"`
	}
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	rel, err := a.rel()
	if err != nil {
		return nil, err
	}
	if a.StartLine == nil || a.StartCharacter == nil || a.EndLine == nil || a.EndCharacter == nil {
		return nil, agent.Errorf(agent.CodeInvalid, "", "start_line, start_character, end_line and end_character are required (1-based)")
	}
	t, uri, err := c.open(ctx, rel)
	if err != nil {
		return nil, err
	}
	r, err := t.SpanToLSP(Span{Start: Pos{*a.StartLine, *a.StartCharacter}, End: Pos{*a.EndLine, *a.EndCharacter}}, c.s.enc)
	if err != nil {
		return nil, err
	}
	if after(r.Start, r.End) {
		return nil, agent.Errorf(agent.CodeInvalid, "", "the range ends before it starts")
	}
	// The server's own diagnostics in the range are the context quick fixes answer to.
	diags := []diagnostic{}
	c.s.mu.Lock()
	if p := c.s.diags[uri]; p != nil {
		for _, d := range p.diags {
			if !after(d.Range.Start, r.End) && !after(r.Start, d.Range.End) {
				diags = append(diags, d)
			}
		}
	}
	c.s.mu.Unlock()
	actx := map[string]any{"diagnostics": diags, "triggerKind": 1}
	if a.KindFilter != nil && *a.KindFilter != "" {
		actx["only"] = []string{*a.KindFilter}
	}
	var res []json.RawMessage
	if err := c.s.call(ctx, "textDocument/codeAction", map[string]any{"textDocument": map[string]string{"uri": uri}, "range": r, "context": actx}, &res); err != nil {
		return nil, err
	}
	out := make([]codeAction, 0, len(res))
	for _, item := range res {
		var ca struct {
			Title       string          `json:"title"`
			Kind        string          `json:"kind"`
			IsPreferred bool            `json:"isPreferred"`
			Disabled    json.RawMessage `json:"disabled"`
			Edit        json.RawMessage `json:"edit"`
			Command     json.RawMessage `json:"command"`
			Data        json.RawMessage `json:"data"`
		}
		if json.Unmarshal(item, &ca) != nil {
			continue
		}
		var bare string
		if json.Unmarshal(ca.Command, &bare) == nil { // a Command, not a CodeAction
			out = append(out, codeAction{Title: ca.Title, Command: item})
			continue
		}
		if len(ca.Edit) == 0 && len(ca.Data) > 0 && len(ca.Disabled) == 0 && c.s.caps.resolveCodeActions() {
			var resolved struct {
				Edit    json.RawMessage `json:"edit"`
				Command json.RawMessage `json:"command"`
			}
			if err := c.s.call(ctx, "codeAction/resolve", item, &resolved); err == nil {
				ca.Edit = resolved.Edit
				if len(resolved.Command) > 0 {
					ca.Command = resolved.Command
				}
			} else if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
		action := codeAction{Title: ca.Title, Kind: ca.Kind, IsPreferred: ca.IsPreferred, Disabled: ca.Disabled, Command: ca.Command}
		if len(ca.Edit) > 0 && string(ca.Edit) != "null" {
			we, err := c.workspaceEdit(ca.Edit)
			if err != nil {
				continue // an action this plan can't express
			}
			action.Edit = we
		}
		out = append(out, action)
	}
	return out, nil
}

func after(a, b Position) bool {
	return a.Line > b.Line || a.Line == b.Line && a.Character > b.Character
}
