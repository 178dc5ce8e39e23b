package lsp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/tool"
	"github.com/cwsdev/cws/workspace/toolset/core"
)

// WorkspaceEdit is the seed's rename plan: edits by file URI. Positions are the API's
// (1-based, code points).
type WorkspaceEdit struct {
	Changes map[string][]Edit `json:"changes"`
}

// Edit is one LSP TextEdit in the API's positions.
type Edit struct {
	Range struct {
		Start Pos `json:"start"`
		End   Pos `json:"end"`
	} `json:"range"`
	NewText string `json:"newText"`
}

// Pos is a 1-based line and character.
type Pos struct {
	Line      int `json:"line"`
	Character int `json:"character"`
}

// Plan turns a workspace edit into core's edit plan, refusing URIs outside the workspace.
func (w WorkspaceEdit) Plan() ([]core.FileEdits, error) {
	var plan []core.FileEdits
	for uri, edits := range w.Changes {
		rel, err := RelPath(uri)
		if err != nil {
			return nil, err
		}
		fe := core.FileEdits{Path: rel}
		for _, e := range edits {
			fe.Edits = append(fe.Edits, core.TextEdit{StartLine: e.Range.Start.Line, StartCharacter: e.Range.Start.Character,
				EndLine: e.Range.End.Line, EndCharacter: e.Range.End.Character, NewText: e.NewText})
		}
		plan = append(plan, fe)
	}
	sort.Slice(plan, func(i, j int) bool { return plan[i].Path < plan[j].Path })
	return plan, nil
}

// RelPath turns a file:///workspace/… URI into a workspace-relative path.
func RelPath(uri string) (string, error) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" {
		return "", &policy.Violation{Err: policy.ErrTraversal, Path: uri, Detail: "edit outside the workspace"}
	}
	if !strings.HasPrefix(u.Path, policy.WorkspaceDir+"/") {
		return "", &policy.Violation{Err: policy.ErrTraversal, Path: u.Path, Detail: "edit outside the workspace"}
	}
	return policy.Normalize(".", u.Path)
}

// applyRename applies a rename plan all or nothing. A plan that had edits in denied
// files left out is refused: applying the rest would leave the code broken.
func applyRename(ctx context.Context, env tool.Env, out *Output) (*Output, error) {
	if out.dropped > 0 {
		return nil, &policy.Violation{Err: policy.ErrPolicy, Rule: "deniedPaths",
			Detail: fmt.Sprintf("the rename also edits %d place(s) in paths the policy denies; nothing was applied", out.dropped)}
	}
	var we WorkspaceEdit
	if err := json.Unmarshal(out.raw, &we); err != nil || we.Changes == nil {
		return nil, &tool.Fail{Code: "no_rename", Message: "the language server offered no rename here"}
	}
	plan, err := we.Plan()
	if err != nil {
		return nil, err
	}
	files, err := core.ApplyEdits(ctx, env, plan)
	if err != nil {
		return nil, err
	}
	res, _ := json.Marshal(struct {
		Changes map[string][]Edit `json:"changes"`
		Applied bool              `json:"applied"`
		Files   []string          `json:"files"`
	}{we.Changes, true, files})
	return &Output{raw: res}, nil
}
