package lsp

import (
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent"
)

// Language is one language the manager can serve: which files are its, which servers
// may serve it (the first found on the search path wins), and what to say when none is.
type Language struct {
	Name    string            // as users say it: "Go", "Python"
	Exts    map[string]string // file extension (with the dot) → LSP languageId
	Servers []Command         // candidates in order of preference
	Missing string            // what to install, for the error when no server is found
	// Markers are file names that say a directory holds a project in this language: at
	// the workspace root they make workspace_symbol_search without a file start these
	// servers, and a write or an upload that shows one (with a source file beneath it)
	// starts the server in the background (warm.go).
	Markers []string
	// Configs are the file names that give the server a project of its own
	// (tsconfig.json). Where none is in a file's directory or above it, the server
	// knows only the files it has open, so the manager opens that project's files
	// itself, a bounded number (project.go). nil: the server finds its files itself.
	Configs []string
	// Env is added to the server's environment, each only where the base environment
	// does not set it already.
	Env map[string]string
}

// Command is a server program and its arguments. A Bin with a slash is used as it is;
// otherwise it is looked up on the manager's search path only.
type Command struct {
	Bin  string
	Args []string
}

// DefaultLanguages are the languages of the workspace images.
func DefaultLanguages() []Language {
	return []Language{
		{
			Name:    "Go",
			Exts:    map[string]string{".go": "go"},
			Servers: []Command{{Bin: "gopls"}},
			Missing: "install gopls (go install golang.org/x/tools/gopls@latest) on the image's PATH",
			Markers: []string{"go.mod", "go.work"},
			// The toolchain must not be downloaded (no network, read-only root), caches go
			// to /tmp (HOME is /tmp), and module resolution stays offline.
			Env: map[string]string{
				"GOTOOLCHAIN": "local",
				"GOPATH":      "/tmp/go",
				"GOMODCACHE":  "/tmp/go/pkg/mod",
				"GOCACHE":     "/tmp/.cache/go-build",
				"GOFLAGS":     "-mod=mod",
				"GOPROXY":     "off",
				"CGO_ENABLED": "0",
			},
		},
		{
			Name: "Python",
			Exts: map[string]string{".py": "python", ".pyi": "python"},
			Servers: []Command{
				{Bin: "pyright-langserver", Args: []string{"--stdio"}},
				{Bin: "basedpyright-langserver", Args: []string{"--stdio"}},
				{Bin: "pylsp"},
			},
			Missing: "install pyright (npm) or python3-pylsp",
			Markers: []string{"pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "pyrightconfig.json"},
		},
		{
			Name: "TypeScript/JavaScript",
			Exts: map[string]string{
				".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "typescriptreact",
				".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascriptreact",
			},
			Servers: []Command{{Bin: "typescript-language-server", Args: []string{"--stdio"}}},
			Missing: "install typescript-language-server and typescript (npm)",
			Markers: []string{"package.json", "tsconfig.json", "jsconfig.json"},
			Configs: []string{"tsconfig.json", "jsconfig.json"},
		},
		{
			Name: "C/C++",
			Exts: map[string]string{
				".c": "c", ".h": "c",
				".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".c++": "cpp", ".hh": "cpp", ".hpp": "cpp", ".hxx": "cpp", ".h++": "cpp",
			},
			Servers: []Command{{Bin: "clangd"}},
			Missing: "install clangd",
			Markers: []string{"compile_commands.json", "compile_flags.txt", "CMakeLists.txt"},
		},
	}
}

// languageOf finds the language of a file by its extension.
func (m *Manager) languageOf(name string) (*Language, string, error) {
	ext := strings.ToLower(path.Ext(name))
	for i := range m.cfg.Languages {
		if id, ok := m.cfg.Languages[i].Exts[ext]; ok {
			return &m.cfg.Languages[i], id, nil
		}
	}
	if ext == "" {
		return nil, "", agent.Errorf(agent.CodeUnsupported, name, "no language server for a file without an extension")
	}
	return nil, "", agent.Errorf(agent.CodeUnsupported, name, "no language server for %s files", ext)
}

// find returns the first of lang's servers present on the search path, or an
// unsupported error naming the language and what to install.
func (m *Manager) find(lang *Language) (Command, string, error) {
	for _, c := range lang.Servers {
		if bin, ok := lookPath(c.Bin, m.cfg.Path); ok {
			return c, bin, nil
		}
	}
	names := make([]string, len(lang.Servers))
	for i, c := range lang.Servers {
		names[i] = c.Bin
	}
	return Command{}, "", agent.Errorf(agent.CodeUnsupported, "", "no language server for %s in this image (looked for %s on %s): %s",
		lang.Name, strings.Join(names, ", "), m.cfg.Path, lang.Missing)
}

func lookPath(name, search string) (string, bool) {
	if strings.Contains(name, "/") {
		fi, err := os.Stat(name)
		return name, err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
	}
	for _, dir := range filepath.SplitList(search) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}
