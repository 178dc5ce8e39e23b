package lsp

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// A TypeScript server finds a project's files through its tsconfig.json or
// jsconfig.json. Without one it builds an inferred project from the files it has open
// and what they import, so a references search or a rename from the declaring file
// misses the files that use it. An editor with the folder open would have those files
// open; the manager does the same: before the first request to such a server, and
// before each request that looks across files, it opens the language's files that no
// config covers, within bounds. No config is ever written into the workspace.

const (
	// maxProjectFiles bounds the files opened per configless project (and never more
	// than half of Config.MaxOpenDocuments).
	maxProjectFiles = 100
	// maxProjectBytes bounds their total size.
	maxProjectBytes = 4 << 20
	// maxProjectFile leaves out larger files: bundles, generated code.
	maxProjectFile = 256 << 10
	// maxScan bounds the directory entries one walk looks at.
	maxScan = 10000
)

// skippedDirs are directories no walk enters: dependencies and build output. Hidden
// directories (.git, the agent's staging directories) are skipped too.
var skippedDirs = map[string]bool{
	"node_modules": true, "bower_components": true, "jspm_packages": true, "vendor": true,
	"dist": true, "build": true, "out": true, "coverage": true, "target": true,
	"__pycache__": true, "venv": true,
}

// scan walks the workspace directory dir (relative, slash-separated) breadth first:
// shallow directories first, each one's entries in name order. It calls visit with
// each directory and its entries; visit returns whether to enter that directory's
// subdirectories. Links are never followed. It stops after maxScan entries, or when
// visit sets *stop.
func (m *Manager) scan(dir string, visit func(dir string, ents []os.DirEntry, stop *bool) bool) {
	queue := []string{dir}
	seen, stop := 0, false
	for len(queue) > 0 && !stop && seen < maxScan {
		d := queue[0]
		queue = queue[1:]
		ents, err := os.ReadDir(filepath.Join(m.cfg.Root, d))
		if err != nil {
			continue
		}
		if len(ents) > maxScan-seen {
			ents = ents[:maxScan-seen]
		}
		seen += len(ents)
		if !visit(d, ents, &stop) {
			continue
		}
		for _, e := range ents {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && !skippedDirs[e.Name()] {
				queue = append(queue, path.Join(d, e.Name()))
			}
		}
	}
}

// projectFiles lists lang's source files that no config file covers (Language.Configs
// in their directory or above), shallow ones first, within the bounds above.
func (m *Manager) projectFiles(lang *Language) []string {
	limit := min(maxProjectFiles, m.cfg.MaxOpenDocuments/2)
	var out []string
	var total int64
	m.scan(".", func(dir string, ents []os.DirEntry, stop *bool) bool {
		for _, e := range ents {
			if hasName(lang.Configs, e.Name()) {
				return false // a configured project: its server finds its files
			}
		}
		for _, e := range ents {
			name := e.Name()
			if !e.Type().IsRegular() || !isSource(lang, name) || strings.HasSuffix(name, ".min.js") {
				continue
			}
			fi, err := e.Info()
			if err != nil || fi.Size() > maxProjectFile || total+fi.Size() > maxProjectBytes {
				continue
			}
			total += fi.Size()
			out = append(out, path.Join(dir, name))
			if len(out) >= limit {
				*stop = true
				return false
			}
		}
		return true
	})
	return out
}

// openProject opens the files of lang's configless project that the server does not
// have open (a file the guard refuses, or that is gone, is left out). It runs before
// the first request to the server and before each one that looks across files.
func (c *call) openProject(ctx context.Context, lang *Language) error {
	s := c.s
	if lang.Configs == nil || (s.projected.Load() && !c.wide) {
		return nil
	}
	rels := c.m.projectFiles(lang)
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	for _, rel := range rels {
		uri := c.m.serverURI(rel)
		s.mu.Lock()
		_, open := s.docs[uri]
		s.mu.Unlock()
		if open {
			continue
		}
		src, err := c.files.Read(rel)
		if err != nil {
			continue
		}
		_, id, _ := c.m.languageOf(rel)
		if err := c.syncOne(ctx, uri, rel, id, src); err != nil {
			return err
		}
	}
	s.projected.Store(true)
	return nil
}

// isSource reports whether name is one of lang's source files.
func isSource(lang *Language, name string) bool {
	_, ok := lang.Exts[strings.ToLower(path.Ext(name))]
	return ok
}

func hasName(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}
