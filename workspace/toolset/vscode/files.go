package vscode

import (
	"context"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/tool"
	"github.com/cwsdev/cws/workspace/toolset/core"
)

func fileTools() []*tool.Tool {
	return []*tool.Tool{
		def("get_file_text_by_path", "Read file", "Get the text content of a file using its path relative to the project root.", tool.Read, getFileTextByPath),
		def("rewrite_file_content", "Rewrite file", "Rewrite the entire content of a specified project file with new text.", tool.Destructive, rewriteFileContent),
		def("create_new_file_with_text", "Create file", "Create a new file at the specified path in the project directory (parent directories too) and populate it with content.", tool.Destructive, createNewFileWithText),
		def("list_files_in_folder", "List folder", "List all files and directories in the specified project folder (\"/\" for the root).", tool.Read, listFilesInFolder),
		def("replace_file_content_at_position", "Replace lines", "Replace the content between startLine and endLine (1-based, inclusive) with content; with offset, the first offset characters of startLine are kept. Returns \"ok\".", tool.Destructive, replaceFileContentAtPosition),
		def("append_file_content", "Append to file", "Append content to the end of a file.", tool.Destructive, appendFileContent),
		def("replace_specific_text", "Replace text", "Replace occurrences of searchText in a file with replaceText: the first one, or all with replaceAll.", tool.Destructive, replaceSpecificText),
		def("search_in_files_content", "Search in files", "Search for a text substring (case-sensitive) within all files in the project; returns the files containing it.", tool.Read, searchInFilesContent),
		def("find_files_by_name_substring", "Find files by name", "Search for all files in the project whose names contain the specified substring (case-insensitive).", tool.Read, findFilesByNameSubstring),
	}
}

type FileText struct {
	Content      string `json:"content"`
	Path         string `json:"path" jsonschema:"Absolute path in the container."`
	RelativePath string `json:"relativePath"`
}

func getFileTextByPath(ctx context.Context, c *call, a *PathArg) (*FileText, error) {
	r, err := rel(a.PathInProject)
	if err != nil {
		return nil, err
	}
	text, err := c.readText(ctx, r)
	if err != nil {
		return nil, err
	}
	return &FileText{Content: text, Path: abs(r), RelativePath: r}, nil
}

type PathTextArgs struct {
	PathArg
	Text string `json:"text" jsonschema:"The content to write."`
}

type FileWritten struct {
	Path            string `json:"path"`
	RelativePath    string `json:"relativePath"`
	Size            *int64 `json:"size,omitempty"`
	OperationTimeMs int64  `json:"operationTimeMs"`
}

func rewriteFileContent(ctx context.Context, c *call, a *PathTextArgs) (*FileWritten, error) {
	start := time.Now()
	r, err := rel(a.PathInProject)
	if err != nil {
		return nil, err
	}
	w, err := c.writeText(ctx, r, a.Text)
	if err != nil {
		return nil, err
	}
	return &FileWritten{Path: abs(r), RelativePath: r, Size: &w.Size, OperationTimeMs: since(start)}, nil
}

func createNewFileWithText(ctx context.Context, c *call, a *PathTextArgs) (*FileWritten, error) {
	start := time.Now()
	r, err := rel(a.PathInProject)
	if err != nil {
		return nil, err
	}
	if _, err := c.writeText(ctx, r, a.Text); err != nil {
		return nil, err
	}
	return &FileWritten{Path: abs(r), RelativePath: r, OperationTimeMs: since(start)}, nil
}

type FolderEntry struct {
	Name string `json:"name"`
	Type string `json:"type" jsonschema:"file or directory."`
	Path string `json:"path" jsonschema:"Relative to the project root."`
}

func listFilesInFolder(ctx context.Context, c *call, a *PathArg) (*[]FolderEntry, error) {
	r, err := rel(a.PathInProject)
	if err != nil {
		return nil, err
	}
	l, err := c.core.ListFiles(ctx, &core.ListFilesArgs{Path: r})
	if err != nil {
		return nil, err
	}
	c.env.Note(l.Cut())
	out := make([]FolderEntry, 0, len(l.Entries))
	for _, e := range l.Entries {
		t := "file"
		if e.Type == agent.TypeDir {
			t = "directory"
		}
		out = append(out, FolderEntry{Name: e.Name, Type: t, Path: e.Path})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Type != out[j].Type {
			return out[i].Type == "directory"
		}
		return out[i].Name < out[j].Name
	})
	return &out, nil
}

type ReplaceAtArgs struct {
	PathArg
	StartLine int    `json:"startLine" jsonschema:"The starting line number (1-based)."`
	EndLine   int    `json:"endLine" jsonschema:"The ending line number (1-based, inclusive)."`
	Content   string `json:"content" jsonschema:"The new content."`
	Offset    int    `json:"offset,omitempty" jsonschema:"The character offset within startLine (0-based): the characters before it are kept. Default 0."`
}

func replaceFileContentAtPosition(ctx context.Context, c *call, a *ReplaceAtArgs) (*string, error) {
	r, err := rel(a.PathInProject)
	if err != nil {
		return nil, err
	}
	if err := c.env.Policy().CheckEdit(int64(len(a.Content))); err != nil {
		return nil, err
	}
	text, err := c.readText(ctx, r)
	if err != nil {
		return nil, err
	}
	lines := strings.SplitAfter(text, "\n")
	if lines[len(lines)-1] == "" && len(lines) > 1 {
		lines = lines[:len(lines)-1]
	}
	switch {
	case a.StartLine < 1 || a.StartLine > len(lines):
		return nil, tool.Invalidf("startLine", "startLine %d is outside the file's lines 1..%d", a.StartLine, len(lines))
	case a.EndLine < a.StartLine || a.EndLine > len(lines):
		return nil, tool.Invalidf("endLine", "endLine %d must be between startLine %d and %d", a.EndLine, a.StartLine, len(lines))
	case a.Offset < 0:
		return nil, tool.Invalidf("offset", "offset must not be negative")
	}
	first := strings.TrimSuffix(lines[a.StartLine-1], "\n")
	if a.Offset > runeLen(first) {
		return nil, tool.Invalidf("offset", "offset %d is past the end of line %d (%d characters)", a.Offset, a.StartLine, runeLen(first))
	}
	keep := string([]rune(first)[:a.Offset])
	last := lines[a.EndLine-1]
	nl := ""
	if strings.HasSuffix(last, "\n") && !strings.HasSuffix(a.Content, "\n") {
		nl = "\n"
	}
	out := strings.Join(lines[:a.StartLine-1], "") + keep + a.Content + nl + strings.Join(lines[a.EndLine:], "")
	if _, err := c.writeText(ctx, r, out); err != nil {
		return nil, err
	}
	return ptr("ok"), nil
}

func appendFileContent(ctx context.Context, c *call, a *PathTextArgs) (*FileWritten, error) {
	start := time.Now()
	r, err := rel(a.PathInProject)
	if err != nil {
		return nil, err
	}
	if err := c.env.Policy().CheckEdit(int64(len(a.Text))); err != nil {
		return nil, err
	}
	text, err := c.readText(ctx, r)
	if err != nil {
		return nil, err
	}
	if _, err := c.writeText(ctx, r, text+a.Text); err != nil {
		return nil, err
	}
	return &FileWritten{Path: abs(r), RelativePath: r, OperationTimeMs: since(start)}, nil
}

type ReplaceTextArgs struct {
	PathArg
	SearchText  string `json:"searchText" jsonschema:"The text to search for."`
	ReplaceText string `json:"replaceText" jsonschema:"The text to replace with."`
	ReplaceAll  bool   `json:"replaceAll,omitempty" jsonschema:"Whether to replace all occurrences. Default: false (the first one)."`
}

type Replaced struct {
	Path            string `json:"path"`
	Replacements    int    `json:"replacements"`
	OperationTimeMs int64  `json:"operationTimeMs"`
}

func replaceSpecificText(ctx context.Context, c *call, a *ReplaceTextArgs) (*Replaced, error) {
	start := time.Now()
	if a.SearchText == "" {
		return nil, tool.Invalidf("searchText", "searchText must not be empty")
	}
	r, err := rel(a.PathInProject)
	if err != nil {
		return nil, err
	}
	if err := c.env.Policy().CheckEdit(int64(max(len(a.SearchText), len(a.ReplaceText)))); err != nil {
		return nil, err
	}
	text, err := c.readText(ctx, r)
	if err != nil {
		return nil, err
	}
	n := strings.Count(text, a.SearchText)
	if n > 0 {
		if !a.ReplaceAll {
			n = 1
		}
		if _, err := c.writeText(ctx, r, strings.Replace(text, a.SearchText, a.ReplaceText, n)); err != nil {
			return nil, err
		}
	}
	return &Replaced{Path: abs(r), Replacements: n, OperationTimeMs: since(start)}, nil
}

type SearchArgs struct {
	SearchText string `json:"searchText" jsonschema:"The text to search for in files."`
}

type FoundFile struct {
	Path         string `json:"path" jsonschema:"Relative to the project root."`
	AbsolutePath string `json:"absolutePath"`
}

func searchInFilesContent(ctx context.Context, c *call, a *SearchArgs) (*[]FoundFile, error) {
	res, err := c.core.SearchFiles(ctx, &core.SearchFilesArgs{Query: a.SearchText, Options: &core.SearchFilesOptions{CaseSensitive: true, MaxResults: 10000}})
	if err != nil {
		return nil, err
	}
	if res.Truncated {
		c.env.Note("truncated: the files of the first " + strconv.Itoa(res.Count) + " matches are listed, and more matches were left out (the search stops at 10000 matches or at about 1 MiB): search for a longer text to see the rest.")
	}
	out := []FoundFile{}
	seen := map[string]bool{}
	for _, m := range res.Results {
		if !seen[m.Path] {
			seen[m.Path] = true
			out = append(out, FoundFile{Path: m.Path, AbsolutePath: abs(m.Path)})
		}
	}
	return &out, nil
}

type NameArgs struct {
	NameSubstring string `json:"nameSubstring" jsonschema:"The substring to search for in file names."`
}

type NamedFile struct {
	Path         string `json:"path"`
	Name         string `json:"name"`
	Directory    string `json:"directory"`
	AbsolutePath string `json:"absolutePath"`
}

// maxFound bounds find_files_by_name_substring's answer.
const maxFound = 100000

// findFilesByNameSubstring asks the agent only for the names that match (a glob that
// ignores case), so that a large tree's other files never fill the answer.
func findFilesByNameSubstring(ctx context.Context, c *call, a *NameArgs) (*[]NamedFile, error) {
	if a.NameSubstring == "" {
		return nil, tool.Invalidf("nameSubstring", "nameSubstring must not be empty")
	}
	out := []NamedFile{}
	if strings.Contains(a.NameSubstring, "/") {
		return &out, nil // no file name holds one
	}
	found, err := c.core.FindFiles(ctx, &core.FindFilesArgs{Pattern: "*" + foldGlob(a.NameSubstring) + "*", MaxResults: maxFound})
	if err != nil {
		return nil, err
	}
	c.env.Note(found.Cut())
	want := strings.ToLower(a.NameSubstring)
	for _, p := range found.Files {
		name := path.Base(p)
		if p == ".git" || strings.HasPrefix(p, ".git/") || strings.Contains(p, "/node_modules/") || strings.HasPrefix(p, "node_modules/") ||
			!strings.Contains(strings.ToLower(name), want) {
			continue
		}
		out = append(out, NamedFile{Path: p, Name: name, Directory: path.Dir(p), AbsolutePath: abs(p)})
	}
	return &out, nil
}

// foldGlob is a glob matching s in any case: letters become [aA], the glob's special
// characters are escaped.
func foldGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		lo, up := unicode.ToLower(r), unicode.ToUpper(r)
		switch {
		case lo != up:
			b.WriteString("[" + string(lo) + string(up) + "]")
		case strings.ContainsRune(`*?[]{}\`, r):
			b.WriteString(`\` + string(r))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
