package vscode

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/tool"
	"github.com/cwsdev/cws/workspace/toolset/core"
	"github.com/cwsdev/cws/workspace/toolset/lsp"
)

func analysisTools() []*tool.Tool {
	return []*tool.Tool{
		def("get_symbols_in_file", "Symbols in file", "Get all symbols defined in the file (functions, classes, variables, …), from its language server. Positions are 0-based.", tool.Read, getSymbolsInFile),
		def("find_references", "Find references", "Find all reference locations of the symbol at a 0-based line and character, from the language server.", tool.Read, findReferences),
		def("refactor_code_at_location", "Refactor", "Refactor at a 0-based position and apply the edits: rename (options.newName), extract_function or extract_variable (the language server's matching refactoring, over options.endLine/endCharacter when given).", tool.Destructive, refactorCodeAtLocation),
	}
}

// lspCall runs one of the lsp toolset's operations on the agent's language servers for
// a file that may be read. Its positions are 1-based code points.
func (c *call) lspCall(ctx context.Context, name string, args map[string]any, out any) (int, error) {
	if p, ok := args["file_path"].(string); ok {
		r, err := c.core.Resolve(p, false, 0)
		if err != nil {
			return 0, err
		}
		args["file_path"] = r
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return 0, err
	}
	res, err := c.env.Agent().LSP(ctx, agent.LSPArgs{Tool: name, Args: raw, Guard: c.env.Guard()})
	if err != nil {
		return 0, err
	}
	if out != nil && len(res.Result) > 0 {
		if err := json.Unmarshal(res.Result, out); err != nil {
			return 0, fmt.Errorf("lsp %s result: %w", name, err)
		}
	}
	if res.Omitted > 0 {
		c.env.Note(fmt.Sprintf("truncated: %d result(s) were left out to keep the answer within about 1 MiB", res.Omitted))
	}
	return res.Dropped, nil
}

// Range0 is a 0-based range, the plugin's.
type Range0 struct {
	StartLine      int `json:"startLine"`
	StartCharacter int `json:"startCharacter"`
	EndLine        int `json:"endLine"`
	EndCharacter   int `json:"endCharacter"`
}

type span struct {
	Start lsp.Pos `json:"start"`
	End   lsp.Pos `json:"end"`
}

func (s span) zero() Range0 {
	return Range0{s.Start.Line - 1, s.Start.Character - 1, s.End.Line - 1, s.End.Character - 1}
}

type Symbol struct {
	Name   string `json:"name"`
	Kind   string `json:"kind" jsonschema:"VS Code's SymbolKind name: Function, Class, Variable, …"`
	Range  Range0 `json:"range"`
	Text   string `json:"text"`
	Detail string `json:"detail"`
}

type Symbols struct {
	Symbols []Symbol `json:"symbols"`
}

type lspSymbol struct {
	Name     string      `json:"name"`
	Kind     int         `json:"kind"`
	Detail   string      `json:"detail"`
	Range    span        `json:"range"`
	Children []lspSymbol `json:"children"`
}

// symbolKinds are LSP's SymbolKind names (1-based).
var symbolKinds = []string{"File", "Module", "Namespace", "Package", "Class", "Method", "Property", "Field", "Constructor",
	"Enum", "Interface", "Function", "Variable", "Constant", "String", "Number", "Boolean", "Array", "Object", "Key", "Null",
	"EnumMember", "Struct", "Event", "Operator", "TypeParameter"}

func kindName(k int) string {
	if k >= 1 && k <= len(symbolKinds) {
		return symbolKinds[k-1]
	}
	return "Unknown"
}

func getSymbolsInFile(ctx context.Context, c *call, a *PathArg) (*Symbols, error) {
	var syms []lspSymbol
	if _, err := c.lspCall(ctx, "get_document_symbols", map[string]any{"file_path": a.PathInProject}, &syms); err != nil {
		return nil, err
	}
	out := &Symbols{Symbols: []Symbol{}}
	var walk func([]lspSymbol)
	walk = func(ss []lspSymbol) {
		for _, s := range ss {
			out.Symbols = append(out.Symbols, Symbol{Name: s.Name, Kind: kindName(s.Kind), Range: s.Range.zero(), Text: s.Name, Detail: s.Detail})
			walk(s.Children)
		}
	}
	walk(syms)
	return out, nil
}

type PositionArgs struct {
	PathArg
	Line      int `json:"line" jsonschema:"The line number (0-based)."`
	Character int `json:"character" jsonschema:"The character position (0-based)."`
}

func (a *PositionArgs) check() error {
	if a.Line < 0 {
		return tool.Invalidf("line", "line must be 0 or more (0-based)")
	}
	if a.Character < 0 {
		return tool.Invalidf("character", "character must be 0 or more (0-based)")
	}
	return nil
}

type Reference struct {
	Path         string `json:"path" jsonschema:"Relative to the project root."`
	Line         int    `json:"line"`
	Character    int    `json:"character"`
	EndLine      int    `json:"endLine"`
	EndCharacter int    `json:"endCharacter"`
}

type References struct {
	References []Reference `json:"references"`
}

func findReferences(ctx context.Context, c *call, a *PositionArgs) (*References, error) {
	if err := a.check(); err != nil {
		return nil, err
	}
	var locs []struct {
		URI   string `json:"uri"`
		Range span   `json:"range"`
	}
	if _, err := c.lspCall(ctx, "get_references", map[string]any{"file_path": a.PathInProject, "line": a.Line + 1, "character": a.Character + 1,
		"include_declaration": true}, &locs); err != nil {
		return nil, err
	}
	out := &References{References: []Reference{}}
	for _, l := range locs {
		p, err := lsp.RelPath(l.URI)
		if err != nil {
			continue
		}
		r := l.Range.zero()
		out.References = append(out.References, Reference{Path: p, Line: r.StartLine, Character: r.StartCharacter, EndLine: r.EndLine, EndCharacter: r.EndCharacter})
	}
	return out, nil
}

type RefactorArgs struct {
	PositionArgs
	RefactorType string          `json:"refactorType" jsonschema:"rename, extract_function or extract_variable."`
	Options      *RefactorOption `json:"options,omitempty"`
}

type RefactorOption struct {
	NewName      string `json:"newName,omitempty" jsonschema:"The new name (required for rename)."`
	EndLine      *int   `json:"endLine,omitempty" jsonschema:"cws extension: 0-based end line of the code to extract (default: line)."`
	EndCharacter *int   `json:"endCharacter,omitempty" jsonschema:"cws extension: 0-based end character of the code to extract (default: the end of the word or, without one, of the line)."`
}

type Refactored struct {
	Success bool     `json:"success"`
	Message string   `json:"message"`
	Files   []string `json:"files,omitempty" jsonschema:"The files changed, relative to the project root."`
}

func refactorCodeAtLocation(ctx context.Context, c *call, a *RefactorArgs) (*Refactored, error) {
	if err := a.check(); err != nil {
		return nil, err
	}
	o := a.Options
	if o == nil {
		o = &RefactorOption{}
	}
	switch a.RefactorType {
	case "rename":
		if o.NewName == "" {
			return nil, tool.Invalidf("options.newName", "rename needs options.newName")
		}
		var we lsp.WorkspaceEdit
		dropped, err := c.lspCall(ctx, "rename_symbol", map[string]any{"file_path": a.PathInProject, "line": a.Line + 1, "character": a.Character + 1, "new_name": o.NewName}, &we)
		if err != nil {
			return nil, err
		}
		if dropped > 0 {
			return nil, &policy.Violation{Err: policy.ErrPolicy, Rule: "deniedPaths",
				Detail: fmt.Sprintf("the rename also edits %d place(s) in paths the policy denies; nothing was applied", dropped)}
		}
		if len(we.Changes) == 0 {
			return nil, fail("no_rename", "the language server offered no rename at %s:%d:%d", a.PathInProject, a.Line, a.Character)
		}
		files, err := c.apply(ctx, we)
		if err != nil {
			return nil, err
		}
		return &Refactored{Success: true, Message: "Successfully renamed to " + o.NewName, Files: files}, nil
	case "extract_function", "extract_variable":
		return c.extract(ctx, a, o)
	}
	return nil, tool.Invalidf("refactorType", "refactorType %q is not supported: use rename, extract_function or extract_variable", a.RefactorType)
}

func (c *call) apply(ctx context.Context, we lsp.WorkspaceEdit) ([]string, error) {
	plan, err := we.Plan()
	if err != nil {
		return nil, err
	}
	return core.ApplyEdits(ctx, c.env, plan)
}

type codeAction struct {
	Title string             `json:"title"`
	Kind  string             `json:"kind"`
	Edit  *lsp.WorkspaceEdit `json:"edit"`
}

// extract applies the language server's extract refactoring over the range.
func (c *call) extract(ctx context.Context, a *RefactorArgs, o *RefactorOption) (*Refactored, error) {
	r, err := rel(a.PathInProject)
	if err != nil {
		return nil, err
	}
	text, err := c.readText(ctx, r)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(text, "\n")
	if a.Line >= len(lines) {
		return nil, tool.Invalidf("line", "line %d is past the file's last line %d (0-based)", a.Line, len(lines)-1)
	}
	endLine, endChar := a.Line, runeLen(lines[a.Line])
	if o.EndLine != nil {
		endLine = *o.EndLine
		if endLine < a.Line || endLine >= len(lines) {
			return nil, tool.Invalidf("options.endLine", "endLine must be between line and %d", len(lines)-1)
		}
		endChar = runeLen(lines[endLine])
	}
	if o.EndCharacter != nil {
		endChar = *o.EndCharacter
	}
	want, word := "refactor.extract.function", "function"
	if a.RefactorType == "extract_variable" {
		want, word = "refactor.extract.variable", "variable"
	}
	var actions []codeAction
	if _, err := c.lspCall(ctx, "get_code_actions", map[string]any{"file_path": r, "start_line": a.Line + 1, "start_character": a.Character + 1,
		"end_line": endLine + 1, "end_character": endChar + 1, "kind_filter": "refactor"}, &actions); err != nil {
		return nil, err
	}
	var commandOnly []string
	for _, ca := range actions {
		title := strings.ToLower(ca.Title)
		match := strings.HasPrefix(ca.Kind, want) || (strings.HasPrefix(ca.Kind, "refactor.extract") && strings.Contains(title, word))
		if !match {
			continue
		}
		if ca.Edit == nil || len(ca.Edit.Changes) == 0 {
			commandOnly = append(commandOnly, ca.Title)
			continue
		}
		files, err := c.apply(ctx, *ca.Edit)
		if err != nil {
			return nil, err
		}
		return &Refactored{Success: true, Message: "Applied: " + ca.Title, Files: files}, nil
	}
	what := strings.ReplaceAll(a.RefactorType, "_", " ")
	if len(commandOnly) > 0 {
		return nil, fail("no_refactoring", "the language server offers %q for %s:%d:%d-%d:%d only as a command to run, not as edits: no %s refactoring was applied",
			commandOnly, a.PathInProject, a.Line, a.Character, endLine, endChar, what)
	}
	return nil, fail("no_refactoring", "the language server offers no %s refactoring for %s:%d:%d-%d:%d (select whole statements or an expression with options.endLine/endCharacter)",
		what, a.PathInProject, a.Line, a.Character, endLine, endChar)
}
