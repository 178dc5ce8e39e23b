// Package core is the `core` toolset: the seed's five tools (readFile, writeFile,
// listFiles, searchFiles, runCommand) to the letter, then what agents need daily in the
// same style — exact edits, patches, find, git, background processes. It sees the service
// only through workspace/tool.
package core

import (
	"context"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/tool"
)

// call is what a core tool's body gets: the Env, with what every tool uses at hand.
type call struct {
	env   tool.Env
	agent *agent.Client
	pol   *policy.Effective
	guard *guard.Guard
	out   func(stream string, data []byte)
	tool  string
}

func newCall(env tool.Env) *call {
	return &call{env: env, agent: env.Agent(), pol: env.Policy(), guard: env.Guard(), out: env.Output(), tool: env.Tool()}
}

// NewCall exposes a core call over env to other toolsets' operations that share core's
// (the vscode toolset's git and file tools).
func NewCall(env tool.Env) *Call { return newCall(env) }

// def builds a core tool whose body takes a *call.
func def[A, R any](name, title, desc string, k tool.Kind, dflt tool.Defaults, fn func(ctx context.Context, c *call, a *A) (*R, error)) *tool.Tool {
	return tool.New(name, policy.ToolsetCore, title, desc, k, dflt, func(ctx context.Context, env tool.Env, a *A) (*R, error) {
		return fn(ctx, newCall(env), a)
	})
}

type defaults = tool.Defaults

// failure is an execution outcome a tool reports as an error result.
type failure = tool.Fail

var (
	invalidf  = tool.Invalidf
	asFailure = tool.AsFailure
)
