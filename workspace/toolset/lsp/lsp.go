// Package lsp is the `lsp` toolset: mcpls's 16 code-intelligence tools
// (seeds/mcpls-lsp-tools.md) with its names, snake_case parameters, defaults and result
// shapes, answered by real language servers inside the workspace (the agent's LSP
// manager, sandbox/agent/server/lsp). Positions are 1-based lines and 1-based
// characters in Unicode code points; the agent converts them exactly. Locations in
// denied paths are left out and counted in the call's note.
package lsp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/tool"
)

// Toolset is this toolset's name in policies and ?toolsets=.
const Toolset = "lsp"

// FilePath is a tool's file: an absolute path under /workspace or one relative to it.
type FilePath struct {
	FilePath string `json:"file_path" jsonschema:"Path to the file: absolute under /workspace, or relative to the workspace root."`
}

// Position is a place in a file.
type Position struct {
	FilePath
	Line      int `json:"line" jsonschema:"Line number (1-based)."`
	Character int `json:"character" jsonschema:"Character position (1-based, counted in Unicode code points; tabs count as one)."`
}

type ReferencesArgs struct {
	Position
	IncludeDeclaration bool `json:"include_declaration,omitempty" jsonschema:"Include the declaration site (default: false)."`
}

type CompletionsArgs struct {
	Position
	Trigger string `json:"trigger,omitempty" jsonschema:"Trigger character (e.g. \".\", \":\", \"->\")."`
}

type RenameArgs struct {
	Position
	NewName string `json:"new_name" jsonschema:"New name for the symbol."`
	Apply   bool   `json:"apply,omitempty" jsonschema:"cws extension: also apply the edit plan, all or nothing, with writeFile's path checks (default: false, only return the plan)."`
}

type FormatArgs struct {
	FilePath
	TabSize      *int  `json:"tab_size,omitempty" jsonschema:"Tab size for formatting (default: 4)."`
	InsertSpaces *bool `json:"insert_spaces,omitempty" jsonschema:"Use spaces instead of tabs (default: true)."`
}

type WorkspaceSymbolArgs struct {
	Query      string `json:"query" jsonschema:"Search query for symbol names."`
	KindFilter string `json:"kind_filter,omitempty" jsonschema:"Filter by kind (function, class, struct, method, variable, constant, interface, …)."`
	Limit      int    `json:"limit,omitempty" jsonschema:"Maximum results (default: 100)."`
	FilePath   string `json:"file_path,omitempty" jsonschema:"cws extension: a file whose language server to ask (default: every running server, else those whose project files are at the workspace root)."`
}

type CodeActionsArgs struct {
	FilePath
	StartLine      int    `json:"start_line" jsonschema:"Start line (1-based)."`
	StartCharacter int    `json:"start_character" jsonschema:"Start character (1-based)."`
	EndLine        int    `json:"end_line" jsonschema:"End line (1-based)."`
	EndCharacter   int    `json:"end_character" jsonschema:"End character (1-based)."`
	KindFilter     string `json:"kind_filter,omitempty" jsonschema:"Filter by action kind (quickfix, refactor, source)."`
}

type CallsArgs struct {
	Item map[string]any `json:"item" jsonschema:"A call hierarchy item, exactly as prepare_call_hierarchy returned it."`
}

type LogsArgs struct {
	Limit    int    `json:"limit,omitempty" jsonschema:"Maximum entries to return (default: 50)."`
	MinLevel string `json:"min_level,omitempty" jsonschema:"Minimum level: error, warning, info, debug."`
}

type MessagesArgs struct {
	Limit int `json:"limit,omitempty" jsonschema:"Maximum entries to return (default: 20)."`
}

// Output is a tool's result exactly as the seed shapes it, and how many locations in
// denied paths were left out.
type Output struct {
	raw     json.RawMessage
	dropped int
	omitted int // items left out so that the result fits one answer
}

// MarshalJSON is the seed's result.
func (o *Output) MarshalJSON() ([]byte, error) { return o.raw, nil }

// Note says what was left out.
func (o *Output) Note() string {
	var notes []string
	if o.omitted > 0 {
		notes = append(notes, fmt.Sprintf("truncated: %d result(s) were left out to keep the answer within about 1 MiB: ask for less to see them", o.omitted))
	}
	if o.dropped > 0 {
		notes = append(notes, fmt.Sprintf("%d location(s) in paths the policy denies were left out", o.dropped))
	}
	return strings.Join(notes, "\n")
}

// Tools returns the lsp toolset in the seed's order.
func Tools() []*tool.Tool {
	return []*tool.Tool{
		def[Position]("get_hover", "Hover", "Type information and documentation for the symbol at a position (textDocument/hover). null when there is none.", objOrNull),
		def[Position]("get_definition", "Definition", "Where the symbol at a position is defined (textDocument/definition): an array of {uri, range}.", locations),
		def[ReferencesArgs]("get_references", "References", "Every reference to the symbol at a position (textDocument/references): an array of {uri, range}.", locations),
		def[FilePath]("get_diagnostics", "Diagnostics", "Compiler errors and warnings for a file, fresh: pulled from the server, or waited for after syncing the file (up to 5 s).", array),
		def[RenameArgs]("rename_symbol", "Rename symbol", "The workspace edit that renames the symbol at a position (textDocument/rename): {changes: {uri: [TextEdit]}}. With apply: true cws also applies it.", object),
		def[CompletionsArgs]("get_completions", "Completions", "Completion suggestions at a position (textDocument/completion).", array),
		def[FilePath]("get_document_symbols", "Document symbols", "The outline of a file (textDocument/documentSymbol): symbols with kinds, ranges and children.", array),
		def[FormatArgs]("format_document", "Format document", "The edits that would format a file (textDocument/formatting); nothing is written.", array),
		def[WorkspaceSymbolArgs]("workspace_symbol_search", "Workspace symbols", "Symbols matching a query across the workspace (workspace/symbol).", array),
		def[CodeActionsArgs]("get_code_actions", "Code actions", "Quick fixes and refactorings for a range (textDocument/codeAction).", array),
		def[Position]("prepare_call_hierarchy", "Prepare call hierarchy", "Call hierarchy items at a position, to pass unchanged to get_incoming_calls or get_outgoing_calls.", array),
		def[CallsArgs]("get_incoming_calls", "Incoming calls", "The functions that call an item (callHierarchy/incomingCalls): [{from, fromRanges}].", array),
		def[CallsArgs]("get_outgoing_calls", "Outgoing calls", "The functions an item calls (callHierarchy/outgoingCalls): [{to, fromRanges}].", array),
		def[FilePath]("get_cached_diagnostics", "Cached diagnostics", "The diagnostics the server last pushed for a file, without waiting or starting a server.", object),
		def[LogsArgs]("get_server_logs", "Server logs", "The language servers' log messages (window/logMessage), oldest first.", object),
		def[MessagesArgs]("get_server_messages", "Server messages", "The language servers' messages to the user (window/showMessage), oldest first.", object),
	}
}

// Output schemas. MCP's structuredContent is an object: an array (or null) result is
// carried as {"result": …}, an object as itself.
var (
	array     = mustSchema(`{"type":"object","properties":{"result":{"type":"array"}},"required":["result"]}`)
	locations = mustSchema(`{"type":"object","properties":{"result":{"type":"array","items":{"type":"object","properties":{"uri":{"type":"string"},"range":{"type":"object"}}}}},"required":["result"]}`)
	object    = mustSchema(`{"type":"object"}`)
	objOrNull = mustSchema(`{"type":"object","description":"The hover ({contents, range}), or {\"result\": null} when there is none."}`)
)

func mustSchema(s string) *jsonschema.Schema {
	var sc jsonschema.Schema
	if err := json.Unmarshal([]byte(s), &sc); err != nil {
		panic(err)
	}
	return &sc
}

// def builds one lsp tool: its arguments are checked here (the file's path like
// readFile's), then passed to the agent's LSP manager as the seed names them.
func def[A any](name, title, desc string, out *jsonschema.Schema) *tool.Tool {
	kind := tool.Read
	if name == "rename_symbol" {
		kind = tool.Write // refactoring: with apply it writes
	}
	t := tool.New(name, Toolset, title, desc, kind, nil, func(ctx context.Context, env tool.Env, a *A) (*Output, error) {
		return run(ctx, env, name, a)
	})
	t.OutputSchema = out
	return t
}

func run(ctx context.Context, env tool.Env, name string, a any) (*Output, error) {
	raw, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	var args map[string]any
	if err := json.Unmarshal(raw, &args); err != nil {
		return nil, err
	}
	apply := false
	if name == "rename_symbol" {
		apply, _ = args["apply"].(bool)
		delete(args, "apply")
	}
	if p, ok := args["file_path"].(string); ok && (p != "" || name != "workspace_symbol_search") {
		rel, err := policy.Normalize(".", p)
		if err != nil {
			return nil, err
		}
		if err := env.Policy().CheckRead(rel); err != nil {
			return nil, err
		}
		args["file_path"] = rel
	}
	raw, _ = json.Marshal(args)
	r, err := env.Agent().LSP(ctx, agent.LSPArgs{Tool: name, Args: raw, Guard: env.Guard()})
	if err != nil {
		return nil, err
	}
	out := &Output{raw: r.Result, dropped: r.Dropped, omitted: r.Omitted}
	if len(out.raw) == 0 {
		out.raw = json.RawMessage("null")
	}
	if apply {
		return applyRename(ctx, env, out)
	}
	return out, nil
}
