package core

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/policy"
)

// isoTime formats a modification time as ISO 8601 in UTC, to the second.
func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }

// resolve normalizes a tool's path argument and checks it against the policy: for a
// write, size is the number of bytes about to be written.
func (c *call) resolve(root, p string, write bool, size int64) (string, error) {
	rel, err := policy.Normalize(root, p)
	if err != nil {
		return "", err
	}
	if write {
		err = c.pol.CheckWrite(rel, size)
	} else {
		err = c.pol.CheckRead(rel)
	}
	return rel, err
}

// wrote tells the service a tool changed a file, so a changed policy file takes effect.
func (c *call) wrote(rel string) {
	if rel == policy.FileName {
		c.env.PolicyChanged()
	}
}

// Root is the seed's optional workspaceRoot: "." or "/workspace", the session's own.
type Root struct {
	WorkspaceRoot string `json:"workspaceRoot,omitempty" jsonschema:"Workspace root directory. Only the session's own workspace is accepted: \".\" (default) or \"/workspace\"."`
}

type ReadFileArgs struct {
	Root
	Path string `json:"path" jsonschema:"File path relative to the workspace root (or absolute under /workspace)."`
}

type ReadFileResult struct {
	Path     string `json:"path" jsonschema:"File path, as requested."`
	Size     int64  `json:"size" jsonschema:"File size in bytes."`
	MTime    string `json:"mtime" jsonschema:"Last modification time, ISO 8601 (UTC)."`
	Hash     string `json:"hash" jsonschema:"SHA-256 of the content: sha256:<hex>."`
	IsBinary bool   `json:"isBinary" jsonschema:"Whether the file is binary (then content is base64)."`
	Content  string `json:"content" jsonschema:"File content: text for text files, base64 for binary."`
}

func readFile(ctx context.Context, c *call, a *ReadFileArgs) (*ReadFileResult, error) {
	rel, err := c.resolve(a.WorkspaceRoot, a.Path, false, 0)
	if err != nil {
		return nil, err
	}
	data, r, err := c.agent.ReadFile(ctx, agent.ReadArgs{Path: rel, MaxSize: c.pol.MaxFileSize(), Hash: true, Guard: c.guard})
	if err != nil {
		return nil, err
	}
	res := &ReadFileResult{Path: a.Path, Size: r.Info.Size, MTime: isoTime(r.Info.MTime), Hash: "sha256:" + r.SHA256,
		IsBinary: r.IsBinary || !utf8.Valid(data)}
	if res.IsBinary {
		res.Content = base64.StdEncoding.EncodeToString(data)
	} else {
		res.Content = string(data)
	}
	return res, nil
}

type WriteFileArgs struct {
	Root
	Path     string            `json:"path" jsonschema:"File path relative to the workspace root."`
	Contents string            `json:"contents" jsonschema:"File contents to write (UTF-8 text)."`
	Options  *WriteFileOptions `json:"options,omitempty"`
}

type WriteFileOptions struct {
	Atomic          *bool `json:"atomic,omitempty" jsonschema:"Use atomic write (temp file + rename). Default true."`
	CreateIfMissing *bool `json:"createIfMissing,omitempty" jsonschema:"Create parent directories if missing. Default true."`
}

type WriteFileResult struct {
	Path string `json:"path" jsonschema:"File path, as requested."`
	Size int64  `json:"size" jsonschema:"Bytes written."`
}

func orTrue(b *bool) bool { return b == nil || *b }

func writeFile(ctx context.Context, c *call, a *WriteFileArgs) (*WriteFileResult, error) {
	rel, err := c.resolve(a.WorkspaceRoot, a.Path, true, int64(len(a.Contents)))
	if err != nil {
		return nil, err
	}
	o := a.Options
	if o == nil {
		o = &WriteFileOptions{}
	}
	fi, err := c.agent.WriteFile(ctx, agent.WriteArgs{Path: rel, Atomic: orTrue(o.Atomic), Mkdirs: orTrue(o.CreateIfMissing),
		Create: true, MaxSize: c.pol.MaxFileSize(), Guard: c.guard}, []byte(a.Contents))
	if err != nil {
		return nil, err
	}
	c.wrote(rel)
	return &WriteFileResult{Path: a.Path, Size: fi.Size}, nil
}

type ListFilesArgs struct {
	Root
	Path    string            `json:"path,omitempty" jsonschema:"Directory path. Default \".\"."`
	Options *ListFilesOptions `json:"options,omitempty"`
}

type ListFilesOptions struct {
	Recursive  bool     `json:"recursive,omitempty" jsonschema:"List recursively. Default false."`
	Globs      []string `json:"globs,omitempty" jsonschema:"Glob patterns (** allowed) on workspace-relative paths; only matching entries are listed."`
	MaxEntries int      `json:"maxEntries,omitempty" jsonschema:"Maximum entries to return. Default 10000."`
}

type FileEntry struct {
	Name  string `json:"name"`
	Path  string `json:"path" jsonschema:"Workspace-relative path."`
	Type  string `json:"type" jsonschema:"file, directory, symlink or other."`
	Size  int64  `json:"size"`
	MTime string `json:"mtime" jsonschema:"ISO 8601 (UTC)."`
}

type ListFilesResult struct {
	Path      string      `json:"path"`
	Entries   []FileEntry `json:"entries"`
	Count     int         `json:"count"`
	Truncated bool        `json:"truncated,omitempty" jsonschema:"The listing stopped early: at maxEntries, or where more entries would not fit one answer (about 1 MiB). Narrow path or globs to see the rest."`
	Omitted   int         `json:"omitted,omitempty" jsonschema:"When truncated: how many more entries matched, at least (counting looks at 100000 more entries at most)."`
}

// Cut says why a listing stopped early ("" when it is whole): for the tools whose answer
// has no room for truncated (an array).
func (r *ListFilesResult) Cut() string {
	return cutNote(r.Truncated, r.Count, r.Omitted, "entries", "maxEntries")
}

// maxListEntries caps maxEntries whatever the caller asks.
const maxListEntries = 100000

func listFiles(ctx context.Context, c *call, a *ListFilesArgs) (*ListFilesResult, error) {
	if a.Path == "" {
		a.Path = "."
	}
	rel, err := c.resolve(a.WorkspaceRoot, a.Path, false, 0)
	if err != nil {
		return nil, err
	}
	o := a.Options
	if o == nil {
		o = &ListFilesOptions{}
	}
	if o.MaxEntries < 0 {
		return nil, invalidf("options.maxEntries", "maxEntries must not be negative")
	}
	if err := validGlobs("options.globs", o.Globs); err != nil {
		return nil, err
	}
	maxE := o.MaxEntries
	if maxE == 0 {
		maxE = 10000
	}
	r, err := c.agent.List(ctx, agent.ListArgs{Path: rel, Recursive: o.Recursive, Globs: o.Globs, MaxEntries: min(maxE, maxListEntries), Guard: c.guard})
	if err != nil {
		return nil, err
	}
	res := &ListFilesResult{Path: a.Path, Entries: make([]FileEntry, 0, len(r.Entries)), Truncated: r.Truncated, Omitted: r.Omitted}
	for _, e := range r.Entries {
		res.Entries = append(res.Entries, FileEntry{Name: e.Name, Path: e.Path, Type: e.Type, Size: e.Size, MTime: isoTime(e.MTime)})
	}
	res.Count = len(res.Entries)
	return res, nil
}

type EditFileArgs struct {
	Root
	Path       string `json:"path" jsonschema:"File to edit."`
	OldText    string `json:"oldText" jsonschema:"Exact text to replace. It must occur exactly once unless replaceAll is set: include enough surrounding lines to make it unique."`
	NewText    string `json:"newText" jsonschema:"Replacement text."`
	ReplaceAll bool   `json:"replaceAll,omitempty" jsonschema:"Replace every occurrence. Default false."`
}

type EditFileResult struct {
	Path         string `json:"path"`
	Replacements int    `json:"replacements" jsonschema:"How many occurrences were replaced."`
	Size         int64  `json:"size" jsonschema:"File size after the edit."`
}

func editFile(ctx context.Context, c *call, a *EditFileArgs) (*EditFileResult, error) {
	if a.OldText == "" {
		return nil, invalidf("oldText", "oldText must not be empty: use writeFile to create or overwrite a file")
	}
	if err := c.pol.CheckEdit(int64(max(len(a.OldText), len(a.NewText)))); err != nil {
		return nil, err
	}
	rel, err := c.resolve(a.WorkspaceRoot, a.Path, false, 0)
	if err != nil {
		return nil, err
	}
	data, _, err := c.agent.ReadFile(ctx, agent.ReadArgs{Path: rel, MaxSize: c.pol.MaxFileSize(), Guard: c.guard})
	if err != nil {
		return nil, err
	}
	n := bytes.Count(data, []byte(a.OldText))
	switch {
	case n == 0:
		return nil, invalidf("oldText", "oldText does not occur in %s: read the file again and copy the text exactly", a.Path)
	case n > 1 && !a.ReplaceAll:
		return nil, invalidf("oldText", "oldText occurs %d times in %s: add surrounding lines to make it unique, or set replaceAll", n, a.Path)
	}
	out := strings.Replace(string(data), a.OldText, a.NewText, -1)
	if _, err := c.resolve(a.WorkspaceRoot, a.Path, true, int64(len(out))); err != nil {
		return nil, err
	}
	fi, err := c.agent.WriteFile(ctx, agent.WriteArgs{Path: rel, Atomic: true, MaxSize: c.pol.MaxFileSize(), Guard: c.guard}, []byte(out))
	if err != nil {
		return nil, err
	}
	c.wrote(rel)
	return &EditFileResult{Path: a.Path, Replacements: n, Size: fi.Size}, nil
}

type DeleteFileArgs struct {
	Root
	Path      string `json:"path" jsonschema:"File or directory to delete."`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"Delete a directory and everything in it. Default false."`
}

type DeleteFileResult struct {
	Path    string `json:"path"`
	Deleted bool   `json:"deleted"`
}

func deleteFile(ctx context.Context, c *call, a *DeleteFileArgs) (*DeleteFileResult, error) {
	rel, err := c.resolve(a.WorkspaceRoot, a.Path, true, 0)
	if err != nil {
		return nil, err
	}
	if rel == "." {
		return nil, invalidf("path", "the workspace root cannot be deleted")
	}
	if err := c.agent.Remove(ctx, agent.RemoveArgs{Path: rel, Recursive: a.Recursive, Guard: c.guard}); err != nil {
		return nil, err
	}
	c.wrote(rel)
	return &DeleteFileResult{Path: a.Path, Deleted: true}, nil
}

type MoveFileArgs struct {
	Root
	Source      string `json:"source" jsonschema:"File or directory to move."`
	Destination string `json:"destination" jsonschema:"New path; missing parent directories are created."`
	Overwrite   bool   `json:"overwrite,omitempty" jsonschema:"Replace an existing destination. Default false."`
}

type MoveFileResult struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

func moveFile(ctx context.Context, c *call, a *MoveFileArgs) (*MoveFileResult, error) {
	from, err := c.resolve(a.WorkspaceRoot, a.Source, true, 0)
	if err != nil {
		return nil, err
	}
	to, err := c.resolve(a.WorkspaceRoot, a.Destination, true, 0)
	if err != nil {
		return nil, err
	}
	if _, err := c.agent.Rename(ctx, agent.RenameArgs{From: from, To: to, Overwrite: a.Overwrite, Mkdirs: true, Guard: c.guard}); err != nil {
		return nil, err
	}
	c.wrote(from)
	c.wrote(to)
	return &MoveFileResult{Source: a.Source, Destination: a.Destination}, nil
}

type FindFilesArgs struct {
	Root
	Pattern    string `json:"pattern" jsonschema:"Glob (** allowed) on workspace-relative paths. A pattern without / matches file names at any depth (*.go finds every Go file)."`
	Path       string `json:"path,omitempty" jsonschema:"Directory to search beneath. Default \".\"."`
	MaxResults int    `json:"maxResults,omitempty" jsonschema:"Maximum paths to return. Default 1000."`
}

type FindFilesResult struct {
	Pattern   string   `json:"pattern"`
	Files     []string `json:"files" jsonschema:"Matching workspace-relative paths, sorted."`
	Count     int      `json:"count"`
	Truncated bool     `json:"truncated,omitempty" jsonschema:"The search stopped early: at maxResults, or where more paths would not fit one answer (about 1 MiB). Narrow path or pattern to see the rest."`
	Omitted   int      `json:"omitted,omitempty" jsonschema:"When truncated: how many more files matched, at least (counting looks at 100000 more entries at most)."`
}

// Cut says why a search stopped early ("" when it is whole).
func (r *FindFilesResult) Cut() string {
	return cutNote(r.Truncated, r.Count, r.Omitted, "files", "maxResults")
}

func findFiles(ctx context.Context, c *call, a *FindFilesArgs) (*FindFilesResult, error) {
	if a.Path == "" {
		a.Path = "."
	}
	rel, err := c.resolve(a.WorkspaceRoot, a.Path, false, 0)
	if err != nil {
		return nil, err
	}
	glob := a.Pattern
	if !strings.Contains(glob, "/") {
		glob = "**/" + glob
	} else if rel != "." {
		glob = rel + "/" + strings.TrimPrefix(glob, "/")
	}
	if err := validGlobs("pattern", []string{glob}); err != nil {
		return nil, err
	}
	maxR := a.MaxResults
	if maxR <= 0 {
		maxR = 1000
	}
	r, err := c.agent.List(ctx, agent.ListArgs{Path: rel, Recursive: true, Globs: []string{glob}, MaxEntries: min(maxR, maxListEntries), NoDirs: true, Guard: c.guard})
	if err != nil {
		return nil, err
	}
	res := &FindFilesResult{Pattern: a.Pattern, Files: make([]string, 0, len(r.Entries)), Truncated: r.Truncated, Omitted: r.Omitted}
	for _, e := range r.Entries {
		if e.Type != agent.TypeDir {
			res.Files = append(res.Files, e.Path)
		}
	}
	res.Count = len(res.Files)
	return res, nil
}
