// Package toolset is the catalogue cws serves: every toolset's tools, in listing order,
// and the REST diff. The composition root (cmd/cws) and tests wire it into
// workspace.Config, so the workspace package never imports a toolset.
package toolset

import (
	"context"

	"github.com/cwsdev/cws/workspace/tool"
	"github.com/cwsdev/cws/workspace/toolset/core"
	"github.com/cwsdev/cws/workspace/toolset/lsp"
)

// All returns every tool of every toolset: core, then lsp, then vscode.
func All() []*tool.Tool {
	return append(core.Tools(), lsp.Tools()...)
}

// Diff is the REST diff (core.Diff).
func Diff(ctx context.Context, env tool.Env) (string, error) { return core.Diff(ctx, env) }
