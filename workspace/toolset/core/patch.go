package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
	"github.com/cwsdev/cws/sandbox/agent"
)

type ApplyPatchArgs struct {
	Root
	Patch string `json:"patch" jsonschema:"A unified diff (git diff or diff -u output; a/ and b/ prefixes are stripped). Every file must apply, or nothing is changed."`
}

type PatchedFile struct {
	Path    string `json:"path"`
	OldPath string `json:"oldPath,omitempty" jsonschema:"For renames: the old path."`
	Action  string `json:"action" jsonschema:"modified, created, deleted or renamed."`
}

type ApplyPatchResult struct {
	Files []PatchedFile `json:"files"`
	Count int           `json:"count"`
}

// change is one file's planned outcome, computed before anything is written.
type change struct {
	PatchedFile
	from, to string // normalized old and new paths
	content  []byte // new content (nil for a delete)
	original []byte // old content, to roll back
}

// gitHeader finds a git diff's file header.
var gitHeader = regexp.MustCompile(`(?m)^diff --git `)

// patchName is a file's workspace path in the patch ("" for /dev/null). gitdiff already
// drops a git diff's a/ and b/ prefixes, so a path in a directory named "a" keeps its
// "a/". A traditional diff -u keeps them in its names (and gitdiff may give a modified
// file's old name the new one's "b/"), so for it either prefix is dropped here.
func patchName(name string, git bool) string {
	if name == "" || name == "/dev/null" {
		return ""
	}
	if !git {
		for _, prefix := range []string{"a/", "b/"} {
			if rest, ok := strings.CutPrefix(name, prefix); ok {
				return rest
			}
		}
	}
	return name
}

func applyPatch(ctx context.Context, c *call, a *ApplyPatchArgs) (*ApplyPatchResult, error) {
	if err := c.pol.CheckEdit(int64(len(a.Patch))); err != nil {
		return nil, err
	}
	files, _, err := gitdiff.Parse(strings.NewReader(a.Patch))
	if err != nil {
		return nil, invalidf("patch", "patch cannot be parsed: %v", err)
	}
	if len(files) == 0 {
		return nil, invalidf("patch", "patch holds no file changes")
	}
	git := gitHeader.MatchString(a.Patch)
	var plan []*change
	for _, f := range files {
		ch, err := c.planFile(ctx, a.WorkspaceRoot, f, git)
		if err != nil {
			return nil, err
		}
		plan = append(plan, ch)
	}
	if err := c.applyPlan(ctx, plan); err != nil {
		return nil, err
	}
	res := &ApplyPatchResult{Files: []PatchedFile{}}
	for _, ch := range plan {
		res.Files = append(res.Files, ch.PatchedFile)
	}
	res.Count = len(res.Files)
	return res, nil
}

// planFile reads a file the patch touches and computes its new content.
func (c *call) planFile(ctx context.Context, root string, f *gitdiff.File, git bool) (*change, error) {
	if f.IsBinary {
		return nil, invalidf("patch", "binary patches are not supported (%s)", f.NewName)
	}
	oldName, newName := patchName(f.OldName, git), patchName(f.NewName, git)
	ch := &change{}
	var err error
	if !f.IsNew {
		if ch.from, err = c.resolve(root, oldName, true, 0); err != nil {
			return nil, err
		}
		ch.original, _, err = c.agent.ReadFile(ctx, agent.ReadArgs{Path: ch.from, MaxSize: c.pol.MaxFileSize(), Guard: c.guard})
		if err != nil {
			return nil, err
		}
	}
	if !f.IsDelete {
		var out bytes.Buffer
		if err := gitdiff.Apply(&out, bytes.NewReader(ch.original), f); err != nil {
			var conflict *gitdiff.Conflict
			code := "patch_failed"
			if errors.As(err, &conflict) {
				code = "conflict"
			}
			return nil, &failure{Code: code, Path: newName, Message: fmt.Sprintf("patch does not apply to %s: %v; nothing was changed", newName, err)}
		}
		ch.content = out.Bytes()
		if ch.to, err = c.resolve(root, newName, true, int64(out.Len())); err != nil {
			return nil, err
		}
	}
	switch {
	case f.IsNew:
		ch.PatchedFile = PatchedFile{Path: newName, Action: "created"}
	case f.IsDelete:
		ch.PatchedFile = PatchedFile{Path: oldName, Action: "deleted"}
	case ch.from != ch.to:
		ch.PatchedFile = PatchedFile{Path: newName, OldPath: oldName, Action: "renamed"}
	default:
		ch.PatchedFile = PatchedFile{Path: newName, Action: "modified"}
	}
	return ch, nil
}

// applyPlan writes every change, and puts the originals back if one write fails.
func (c *call) applyPlan(ctx context.Context, plan []*change) error {
	var done []*change
	for _, ch := range plan {
		if err := c.applyChange(ctx, ch); err != nil {
			c.rollback(context.WithoutCancel(ctx), done)
			return err
		}
		done = append(done, ch)
		c.wrote(ch.from)
		c.wrote(ch.to)
	}
	return nil
}

func (c *call) applyChange(ctx context.Context, ch *change) error {
	if ch.content != nil || ch.to != "" {
		if _, err := c.agent.WriteFile(ctx, agent.WriteArgs{Path: ch.to, Atomic: true, Create: true, Mkdirs: true, Guard: c.guard}, ch.content); err != nil {
			return err
		}
	}
	if ch.from != "" && ch.from != ch.to {
		return c.agent.Remove(ctx, agent.RemoveArgs{Path: ch.from, Guard: c.guard})
	}
	return nil
}

func (c *call) rollback(ctx context.Context, done []*change) {
	for i := len(done) - 1; i >= 0; i-- {
		ch := done[i]
		if ch.to != "" && ch.to != ch.from {
			_ = c.agent.Remove(ctx, agent.RemoveArgs{Path: ch.to, Guard: c.guard})
		}
		if ch.from != "" {
			_, _ = c.agent.WriteFile(ctx, agent.WriteArgs{Path: ch.from, Atomic: true, Create: true, Mkdirs: true, Guard: c.guard}, ch.original)
		}
	}
}
