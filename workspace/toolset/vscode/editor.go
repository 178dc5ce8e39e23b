package vscode

import (
	"context"
	"slices"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/tool"
	"github.com/cwsdev/cws/workspace/toolset/core"
)

func editorTools() []*tool.Tool {
	return []*tool.Tool{
		def("get_open_in_editor_file_text", "Active file text", "Retrieve the complete text content of the file currently open in the editor (the session's active file). Returns an empty string if no file is open.",
			tool.Read, getOpenFileText),
		def("get_open_in_editor_file_path", "Active file path", "Get the absolute path (/workspace/…) of the file currently open in the editor. Returns an empty string if no file is open.",
			tool.Read, getOpenFilePath),
		def("replace_selected_text", "Replace selection", "Replace the text currently selected in the editor; with an empty selection, insert at the cursor. The file is edited on disk. Returns \"ok\".",
			tool.Destructive, replaceSelectedText),
		def("replace_current_file_text", "Replace active file", "Replace the entire content of the file currently open in the editor. Returns \"ok\".",
			tool.Destructive, replaceCurrentFileText),
		def("open_file_in_editor", "Open file", "Open the specified file in the editor: it becomes the active file. Optional 1-based line, character, endLine and endCharacter place the cursor or a selection (cws extension). Returns \"file is opened\".",
			tool.Write, openFileInEditor),
	}
}

// EditorKey is the session state key of the editor (an Editor in JSON).
const EditorKey = "vscode.editor"

// Editor is a session's editor: the active file, the open files (workspace-relative)
// and the selection in the active file. There are no unsaved buffers: files are edited
// on disk.
type Editor struct {
	Active string    `json:"active,omitempty"`
	Open   []string  `json:"open,omitempty"`
	Sel    Selection `json:"selection"`
}

// Selection is a range of the active file: 1-based lines and characters (code points),
// start == end for a bare cursor. It is kept ordered (start before end).
type Selection struct {
	StartLine      int `json:"startLine"`
	StartCharacter int `json:"startCharacter"`
	EndLine        int `json:"endLine"`
	EndCharacter   int `json:"endCharacter"`
}

func (s Selection) empty() bool {
	return s.StartLine == s.EndLine && s.StartCharacter == s.EndCharacter
}

func (c *call) editor(ctx context.Context) (*Editor, error) {
	var e Editor
	if _, err := c.env.State().Get(ctx, EditorKey, &e); err != nil {
		return nil, err
	}
	if e.Sel.StartLine == 0 {
		e.Sel = Selection{1, 1, 1, 1}
	}
	return &e, nil
}

func (c *call) saveEditor(ctx context.Context, e *Editor) error {
	return c.env.State().Put(ctx, EditorKey, e)
}

// activeEditor is the editor with an active file, or the plugin's "no active editor".
func (c *call) activeEditor(ctx context.Context) (*Editor, error) {
	e, err := c.editor(ctx)
	if err != nil {
		return nil, err
	}
	if e.Active == "" {
		return nil, fail("no_active_editor", "no active editor")
	}
	return e, nil
}

// readText reads a workspace file as text with core's readFile checks.
func (c *call) readText(ctx context.Context, rel string) (string, error) {
	r, err := c.core.ReadFile(ctx, &core.ReadFileArgs{Path: rel})
	if err != nil {
		return "", err
	}
	if r.IsBinary {
		return "", fail("unsupported", "%s is a binary file", rel)
	}
	return r.Content, nil
}

// writeText writes a whole file with core's writeFile checks.
func (c *call) writeText(ctx context.Context, rel, text string) (*core.WriteFileResult, error) {
	return c.core.WriteFile(ctx, &core.WriteFileArgs{Path: rel, Contents: text})
}

func getOpenFileText(ctx context.Context, c *call, _ *NoArgs) (*string, error) {
	e, err := c.editor(ctx)
	if err != nil {
		return nil, err
	}
	s := ""
	if e.Active != "" {
		if s, err = c.readText(ctx, e.Active); err != nil {
			return nil, err
		}
	}
	return &s, nil
}

func getOpenFilePath(ctx context.Context, c *call, _ *NoArgs) (*string, error) {
	e, err := c.editor(ctx)
	if err != nil {
		return nil, err
	}
	s := ""
	if e.Active != "" {
		s = abs(e.Active)
	}
	return &s, nil
}

type TextArg struct {
	Text string `json:"text" jsonschema:"The new text."`
}

func replaceSelectedText(ctx context.Context, c *call, a *TextArg) (*string, error) {
	e, err := c.activeEditor(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.env.Policy().CheckEdit(int64(len(a.Text))); err != nil {
		return nil, err
	}
	s := e.Sel
	edit := core.TextEdit{StartLine: s.StartLine, StartCharacter: s.StartCharacter, EndLine: s.EndLine, EndCharacter: s.EndCharacter, NewText: a.Text}
	if _, err := core.ApplyEdits(ctx, c.env, []core.FileEdits{{Path: e.Active, Edits: []core.TextEdit{edit}}}); err != nil {
		return nil, err
	}
	// As in VS Code, the cursor ends after the inserted text.
	line, char := s.StartLine, s.StartCharacter
	if i := strings.LastIndexByte(a.Text, '\n'); i >= 0 {
		line, char = line+strings.Count(a.Text, "\n"), runeLen(a.Text[i+1:])+1
	} else {
		char += runeLen(a.Text)
	}
	e.Sel = Selection{line, char, line, char}
	if err := c.saveEditor(ctx, e); err != nil {
		return nil, err
	}
	return ptr("ok"), nil
}

func replaceCurrentFileText(ctx context.Context, c *call, a *TextArg) (*string, error) {
	e, err := c.activeEditor(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := c.writeText(ctx, e.Active, a.Text); err != nil {
		return nil, err
	}
	e.Sel = Selection{1, 1, 1, 1}
	if err := c.saveEditor(ctx, e); err != nil {
		return nil, err
	}
	return ptr("ok"), nil
}

type OpenFileArgs struct {
	PathArg
	Line         *int `json:"line,omitempty" jsonschema:"cws extension: 1-based line to place the cursor on (default 1)."`
	Character    *int `json:"character,omitempty" jsonschema:"cws extension: 1-based character (code point) of the cursor (default 1)."`
	EndLine      *int `json:"endLine,omitempty" jsonschema:"cws extension: 1-based line where a selection ends (default: line)."`
	EndCharacter *int `json:"endCharacter,omitempty" jsonschema:"cws extension: 1-based character where a selection ends, exclusive (default: no selection)."`
}

func openFileInEditor(ctx context.Context, c *call, a *OpenFileArgs) (*string, error) {
	r, err := rel(a.PathInProject)
	if err != nil {
		return nil, err
	}
	if r, err = c.core.Resolve(r, false, 0); err != nil {
		return nil, err
	}
	fi, err := c.env.Agent().Stat(ctx, agent.StatArgs{Path: r, Guard: c.env.Guard()})
	if err != nil {
		if _, ok := tool.AsFailure(err); ok {
			return nil, fail("not_found", "file doesn't exist or can't be opened: %s", a.PathInProject)
		}
		return nil, err
	}
	if fi.Type == agent.TypeDir {
		return nil, fail("is_dir", "file doesn't exist or can't be opened: %s is a directory", a.PathInProject)
	}
	sel, err := selection(a)
	if err != nil {
		return nil, err
	}
	e, err := c.editor(ctx)
	if err != nil {
		return nil, err
	}
	e.Active, e.Sel = r, sel
	if !slices.Contains(e.Open, r) {
		e.Open = append(e.Open, r)
	}
	if err := c.saveEditor(ctx, e); err != nil {
		return nil, err
	}
	return ptr("file is opened"), nil
}

// selection is where open_file_in_editor puts the cursor or selection.
func selection(a *OpenFileArgs) (Selection, error) {
	get := func(p *int, dflt int) int {
		if p == nil {
			return dflt
		}
		return *p
	}
	s := Selection{StartLine: get(a.Line, 1), StartCharacter: get(a.Character, 1)}
	s.EndLine = get(a.EndLine, s.StartLine)
	s.EndCharacter = get(a.EndCharacter, s.StartCharacter)
	if a.EndLine != nil && a.EndCharacter == nil {
		s.EndCharacter = 1
	}
	for field, v := range map[string]int{"line": s.StartLine, "character": s.StartCharacter, "endLine": s.EndLine, "endCharacter": s.EndCharacter} {
		if v < 1 {
			return s, tool.Invalidf(field, "%s must be 1 or more (positions are 1-based)", field)
		}
	}
	if s.EndLine < s.StartLine || (s.EndLine == s.StartLine && s.EndCharacter < s.StartCharacter) {
		s.StartLine, s.StartCharacter, s.EndLine, s.EndCharacter = s.EndLine, s.EndCharacter, s.StartLine, s.StartCharacter
	}
	return s, nil
}

func ptr[T any](v T) *T { return &v }
