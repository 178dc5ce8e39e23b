package workspace

import (
	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/workspace/policy"
)

// Each tool is of one kind: its MCP annotations and the token scope it needs both follow
// from that one choice in its entry.
var (
	readOnly    = kind{Annotations{ReadOnly: true, Idempotent: true}, auth.ScopeToolsRead}
	writes      = kind{Annotations{Idempotent: true}, auth.ScopeToolsWrite}
	destructive = kind{Annotations{Destructive: true}, auth.ScopeToolsWrite}
	runs        = kind{Annotations{Destructive: true, OpenWorld: true}, auth.ScopeToolsExec}
	// Background processes are commands: reading their output or stopping one needs
	// tools:exec too (the output is whatever the command printed, so tools:read alone
	// must not see it).
	watches = kind{Annotations{ReadOnly: true, Idempotent: true}, auth.ScopeToolsExec}
	stops   = kind{Annotations{Destructive: true}, auth.ScopeToolsExec}
)

// DefaultCatalog is cws's tool catalogue: the seed's five tools to the letter, then the
// daily additions in the same style.
func DefaultCatalog() *Catalog {
	core := policy.ToolsetCore
	c := newCatalog(
		def("readFile", core, "Read file", "Read a file from the workspace. Returns its content (text, or base64 for binary files), size, mtime and sha256 hash.",
			readOnly, nil, readFile),
		def("writeFile", core, "Write file", "Write a file in the workspace, replacing its content. Atomic (temp file + rename) by default; creates missing parent directories by default.",
			destructive, defaults{"options.atomic": true, "options.createIfMissing": true}, writeFile),
		def("listFiles", core, "List files", "List a directory's entries (name, path, type, size, mtime), optionally recursively and filtered by ** globs.",
			readOnly, defaults{"path": ".", "options.recursive": false, "options.maxEntries": 10000}, listFiles),
		def("searchFiles", core, "Search files", "Search file contents for text or a regular expression. Skips binary files, .git and .gitignore'd paths. Returns path, 1-based line and column, and the line.",
			readOnly, defaults{"options.regex": false, "options.caseSensitive": false, "options.maxResults": 1000}, searchFiles),
		streaming(def("runCommand", core, "Run command", "Run a program in the workspace without a shell and return its exit code, stdout and stderr. The command must be allowed by policy; output streams as progress while it runs.",
			runs, defaults{"options.timeout": 300}, runCommand)),
		def("editFile", core, "Edit file", "Replace exact text in a file. Refused unless oldText occurs exactly once (or replaceAll is set). Reports how many replacements were made.",
			destructive, defaults{"replaceAll": false}, editFile),
		def("applyPatch", core, "Apply patch", "Apply a unified diff to the workspace, all-or-nothing: if any hunk does not apply, nothing is changed.",
			destructive, nil, applyPatch),
		def("findFiles", core, "Find files", "Find files whose paths match a glob (** allowed; *.go finds Go files at any depth).",
			readOnly, defaults{"path": ".", "maxResults": 1000}, findFiles),
		def("deleteFile", core, "Delete file", "Delete a file, or a directory with recursive.", destructive, nil, deleteFile),
		def("moveFile", core, "Move file", "Move or rename a file or directory; parent directories of the destination are created.", destructive, nil, moveFile),
		def("gitStatus", core, "Git status", "Show the branch, ahead/behind counts and changed files of the workspace's git repository.", readOnly, nil, gitStatus),
		def("gitDiff", core, "Git diff", "Show a unified diff of the worktree (or the index with staged, or against a ref).", readOnly, nil, gitDiff),
		def("gitLog", core, "Git log", "List commits (hash, author, date, subject).", readOnly, defaults{"maxCount": 20}, gitLog),
		def("gitShow", core, "Git show", "Show a commit: header, message and patch.", readOnly, defaults{"ref": "HEAD"}, gitShow),
		def("gitCommit", core, "Git commit", "Commit staged changes (optionally staging paths or everything first). Repository hooks do not run.", writes, nil, gitCommit),
		def("gitBranch", core, "Git branch", "List branches, or create or delete one.", writes, nil, gitBranch),
		def("gitCheckout", core, "Git checkout", "Check out a branch or commit, or create a branch and switch to it.", destructive, nil, gitCheckout),
		def("startProcess", core, "Start process", "Start a program in the background (same policy as runCommand). Returns an id for readProcessOutput and killProcess. It keeps running across reconnects.",
			runs, nil, startProcess),
		streaming(def("readProcessOutput", core, "Read process output", "Read a background process's output since the given offsets; with waitMs, follow it (streamed as progress) until it exits or the wait ends.",
			watches, nil, readProcessOutput)),
		def("listProcesses", core, "List processes", "List background processes, running and finished.", watches, nil, listProcesses),
		def("killProcess", core, "Kill process", "Stop a background process and its children: SIGTERM, then SIGKILL after 2 s.", stops, nil, killProcess),
	)
	return c
}

func streaming(t *Tool) *Tool {
	t.Streams = true
	return t
}
