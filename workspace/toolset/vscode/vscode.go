// Package vscode is the `vscode` toolset: the 41 tools of the VSCode MCP plugin
// (seeds/vscode-mcp-plugin-tools.md), with its names, camelCase parameters and result
// shapes, made meaningful without a desktop. The editor (active file, open files,
// cursor and selection) and the breakpoints are per-session state in the session store
// (tool.Env.State); the terminal is the agent's persistent, policy-checked shell; git,
// file and process operations are core's own (core.NewCall), so their policy checks and
// denied-path scoping are the same; code analysis goes to the agent's language servers.
//
// A tool whose plugin result is a string returns a Go string: MCP carries it as text as
// it is, and the legacy REST envelope as its "status".
package vscode

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/tool"
	"github.com/cwsdev/cws/workspace/toolset/core"
)

// Toolset is this toolset's name in policies and ?toolsets=.
const Toolset = policy.ToolsetVSCode

// call is what a vscode tool's body gets: the Env and core's operations over it.
type call struct {
	env  tool.Env
	core *core.Call
}

// def builds one vscode tool. MCP's structured content is an object, so a result that
// is not one (a string, an array) is described as {"result": …}.
func def[A, R any](name, title, desc string, k tool.Kind, fn func(ctx context.Context, c *call, a *A) (*R, error)) *tool.Tool {
	t := tool.New(name, Toolset, title, desc, k, nil, func(ctx context.Context, env tool.Env, a *A) (*R, error) {
		return fn(ctx, &call{env: env, core: core.NewCall(env)}, a)
	})
	if t.OutputSchema.Type != "object" {
		t.OutputSchema = &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"result": t.OutputSchema}, Required: []string{"result"}}
	}
	return t
}

// Tools returns the vscode toolset in the seed's order.
func Tools() []*tool.Tool {
	var out []*tool.Tool
	for _, family := range [][]*tool.Tool{editorTools(), fileTools(), analysisTools(), debugTools(), terminalTools(), gitTools(), projectTools(), actionTools()} {
		out = append(out, family...)
	}
	return out
}

// NoArgs is the arguments of a tool that takes none.
type NoArgs struct{}

// PathArg is a tool's file or folder.
type PathArg struct {
	PathInProject string `json:"pathInProject" jsonschema:"Path relative to the project root (/workspace), or absolute under /workspace."`
}

// rel normalizes a pathInProject: "/" is the project root.
func rel(p string) (string, error) {
	if p == "/" {
		return ".", nil
	}
	return policy.Normalize(".", p)
}

// abs is a workspace-relative path as the container sees it.
func abs(rel string) string {
	if rel == "." || rel == "" {
		return policy.WorkspaceDir
	}
	return policy.WorkspaceDir + "/" + rel
}

// fail is an execution outcome: an error result whose message the legacy envelope
// carries as "error".
func fail(code, format string, a ...any) error {
	return &tool.Fail{Code: code, Message: sprintf(format, a...)}
}

// runeLen counts code points, the unit of the API's character positions.
func runeLen(s string) int { return utf8.RuneCountInString(s) }

// lineCount is how many lines s has ("a\nb" and "a\nb\n" both have 2; "" has 1).
func lineCount(s string) int {
	n := strings.Count(s, "\n") + 1
	if strings.HasSuffix(s, "\n") && len(s) > 0 {
		n--
	}
	return max(n, 1)
}
