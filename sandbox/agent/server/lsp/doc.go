// Package lsp is the agent's language-server manager: it runs one language server per
// language for the workspace (gopls, pyright or pylsp, typescript-language-server,
// clangd), started on first use — or in the background as soon as a write or an upload
// shows a project of the language (warm.go) — kept warm, stopped when idle and restarted
// after a crash, and serves the 16 code-intelligence tools of seeds/mcpls-lsp-tools.md on
// top of them. A TypeScript/JavaScript project without a tsconfig.json gets its files
// opened, so that the server sees all of them (project.go).
//
// Before each request it syncs the file from disk (didOpen, then didChange with the full
// text when the content changed), answers the server's own requests, and keeps the
// pushed diagnostics and the server's log and show messages in bounded buffers.
// Positions are 1-based lines and 1-based Unicode code points at the API and are
// converted exactly, with each file's text, to LSP's 0-based UTF-16 units (or UTF-8
// where the server agrees). Files are read through the Files the caller gives, so the
// agent's path resolution and guard apply to every file a result touches.
package lsp
