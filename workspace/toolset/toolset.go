// Package toolset is the catalogue cws serves: every toolset's tools, in listing order,
// and the REST diff. The composition root (cmd/cws) and tests wire it into
// workspace.Config, so the workspace package never imports a toolset.
package toolset

import (
	"context"
	"slices"

	"github.com/cwsdev/cws/workspace/tool"
	"github.com/cwsdev/cws/workspace/toolset/core"
	"github.com/cwsdev/cws/workspace/toolset/lsp"
	"github.com/cwsdev/cws/workspace/toolset/terminal"
	"github.com/cwsdev/cws/workspace/toolset/vscode"
)

// All returns every tool of every toolset, in policy.AllToolsets' order: core, vscode,
// lsp, then terminal.
func All() []*tool.Tool {
	return slices.Concat(core.Tools(), vscode.Tools(), lsp.Tools(), terminal.Tools())
}

// Diff is the REST diff (core.Diff).
func Diff(ctx context.Context, env tool.Env) (string, error) { return core.Diff(ctx, env) }
