package core

import "github.com/cwsdev/cws/workspace/tool"

// The kinds of core tools: each entry's MCP annotations and token scope follow from it.
var (
	readOnly    = tool.Read
	writes      = tool.Write
	destructive = tool.Destructive
	runs        = tool.Runs
	watches     = tool.Watches
	stops       = tool.Stops
)

// Tools returns the core toolset in listing order: the seed's five tools to the letter,
// then the daily additions in the same style.
func Tools() []*tool.Tool {
	return []*tool.Tool{
		def("readFile", "Read file", "Read a file from the workspace. Returns its content (text, or base64 for binary files), size, mtime and sha256 hash.",
			readOnly, nil, readFile),
		def("writeFile", "Write file", "Write a file in the workspace, replacing its content. Atomic (temp file + rename) by default; creates missing parent directories by default.",
			destructive, defaults{"options.atomic": true, "options.createIfMissing": true}, writeFile),
		def("listFiles", "List files", "List a directory's entries (name, path, type, size, mtime), optionally recursively and filtered by ** globs.",
			readOnly, defaults{"path": ".", "options.recursive": false, "options.maxEntries": 10000}, listFiles),
		def("searchFiles", "Search files", "Search file contents for text or a regular expression. Skips binary files, .git and .gitignore'd paths. Returns path, 1-based line and column, and the line.",
			readOnly, defaults{"options.regex": false, "options.caseSensitive": false, "options.maxResults": 1000}, searchFiles),
		tool.Streaming(def("runCommand", "Run command", "Run a program in the workspace without a shell and return its exit code, stdout and stderr. The command must be allowed by policy; output streams as progress while it runs.",
			runs, defaults{"options.timeout": 300}, runCommand)),
		def("editFile", "Edit file", "Replace exact text in a file. Refused unless oldText occurs exactly once (or replaceAll is set). Reports how many replacements were made.",
			destructive, defaults{"replaceAll": false}, editFile),
		def("applyPatch", "Apply patch", "Apply a unified diff to the workspace, all-or-nothing: if any hunk does not apply, nothing is changed.",
			destructive, nil, applyPatch),
		def("findFiles", "Find files", "Find files whose paths match a glob (** allowed; *.go finds Go files at any depth).",
			readOnly, defaults{"path": ".", "maxResults": 1000}, findFiles),
		def("deleteFile", "Delete file", "Delete a file, or a directory with recursive.", destructive, nil, deleteFile),
		def("moveFile", "Move file", "Move or rename a file or directory; parent directories of the destination are created.", destructive, nil, moveFile),
		def("gitStatus", "Git status", "Show the branch, ahead/behind counts and changed files of the workspace's git repository.", readOnly, nil, gitStatus),
		def("gitDiff", "Git diff", "Show a unified diff of the worktree (or the index with staged, or against a ref).", readOnly, nil, gitDiff),
		def("gitLog", "Git log", "List commits (hash, author, date, subject).", readOnly, defaults{"maxCount": 20}, gitLog),
		def("gitShow", "Git show", "Show a commit: header, message and patch.", readOnly, defaults{"ref": "HEAD"}, gitShow),
		def("gitCommit", "Git commit", "Commit staged changes (optionally staging paths or everything first). Repository hooks do not run.", writes, nil, gitCommit),
		def("gitBranch", "Git branch", "List branches, or create or delete one.", writes, nil, gitBranch),
		def("gitCheckout", "Git checkout", "Check out a branch or commit, or create a branch and switch to it.", destructive, nil, gitCheckout),
		def("startProcess", "Start process", "Start a program in the background (same policy as runCommand). Returns an id for readProcessOutput and killProcess. It keeps running across reconnects.",
			runs, nil, startProcess),
		tool.Streaming(def("readProcessOutput", "Read process output", "Read a background process's output since the given offsets; with waitMs, follow it (streamed as progress) until it exits or the wait ends.",
			watches, nil, readProcessOutput)),
		def("listProcesses", "List processes", "List background processes, running and finished.", watches, nil, listProcesses),
		def("killProcess", "Kill process", "Stop a background process and its children: SIGTERM, then SIGKILL after 2 s.", stops, nil, killProcess),
	}
}
