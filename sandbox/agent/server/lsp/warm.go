package lsp

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Warm-up: servers ready before they are asked. A server's first answer costs its start
// and its load of the project, seconds; so the agent tells the manager about each
// successful write and upload (Wrote). When one shows a project — a marker file of a
// language (go.mod, package.json, pyproject.toml, …) in the written file's directory or
// above it, or in an uploaded tree, with a source file of the language beneath it — the
// manager starts that language's server in the background once writes have been quiet
// for Config.WarmDelay, opens that source file in it, and waits for the server's first
// diagnostics of it, which it publishes once it has loaded the project and checked the
// file: the first real request finds the server loaded.
//
// Bounds. Each language is warmed once; again only after a tool call has used its
// server and the server has since stopped (an unused warmed server stops after
// Config.IdleTimeout like any other and is not started again by writes). Servers are
// warmed one at a time, and none is started while the container's cgroup has less than
// Config.WarmMemory free. Nothing is warmed before a write or an upload, so a pool's idle
// containers start nothing.

const (
	// warmTimeout bounds one server's warm-up: its start, the sync and the load.
	warmTimeout = 2 * time.Minute
	// warmMaxWait is how long writes that keep coming may put a warm-up off.
	warmMaxWait = 5 * time.Second
	// maxWarmHints bounds the writes remembered between two warm-ups.
	maxWarmHints = 64
	// warmPids is how many more tasks the container's pids limit must allow.
	warmPids = 64
)

// warmState is what writes showed since the last warm-up (guarded by Manager.mu).
type warmState struct {
	hints   []warmHint
	files   Files     // the latest writer's view, whose guard the warm-up reads through
	first   time.Time // when the oldest hint came
	timer   *time.Timer
	running bool
}

// warmHint is one write (a file) or upload (the directory it went into).
type warmHint struct {
	rel string
	dir bool
}

// warmTarget is a server to warm and the file to open in it.
type warmTarget struct {
	lang *Language
	rel  string
}

// Wrote tells the manager that a write created or replaced the workspace file rel, or
// (dir) that an upload extracted a tree into the directory rel. It returns at once; a
// warm-up it calls for runs in the background. files reads for the warm-up, with the
// writer's guard.
func (m *Manager) Wrote(files Files, rel string, dir bool) {
	if m.cfg.WarmDelay < 0 {
		return
	}
	rel = path.Clean(rel)
	var lang *Language
	if !dir {
		if lang = m.languageOfName(path.Base(rel)); lang == nil {
			return // not a source or marker file of any language
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || lang != nil && m.warmedLocked(lang) {
		return
	}
	w := &m.warm
	if len(w.hints) < maxWarmHints {
		w.hints = append(w.hints, warmHint{rel: rel, dir: dir})
	}
	w.files = files
	now := time.Now()
	if w.first.IsZero() {
		w.first = now
	}
	switch {
	case w.running:
		// The running warm-up looks at the hints when it ends.
	case w.timer == nil:
		w.timer = time.AfterFunc(m.cfg.WarmDelay, m.runWarm)
	case now.Sub(w.first) < warmMaxWait:
		w.timer.Reset(m.cfg.WarmDelay) // still writing: later
	}
}

// languageOfName is the language a file name is a source or a marker file of.
func (m *Manager) languageOfName(name string) *Language {
	ext := strings.ToLower(path.Ext(name))
	for i := range m.cfg.Languages {
		lang := &m.cfg.Languages[i]
		if _, ok := lang.Exts[ext]; ok || hasName(lang.Markers, name) {
			return lang
		}
	}
	return nil
}

// warmedLocked reports whether lang needs no warm-up: its server runs, or a warm-up
// already started it. Called with m.mu.
func (m *Manager) warmedLocked(lang *Language) bool {
	sl := m.slots[lang.Name]
	return sl != nil && (sl.warmed || sl.srv != nil && !sl.srv.exitedNow())
}

// used records that a tool call used lang's server: once that server stops, a write
// may warm the language again.
func (m *Manager) used(lang *Language) {
	m.mu.Lock()
	if sl := m.slots[lang.Name]; sl != nil {
		sl.warmed = false
	}
	m.mu.Unlock()
}

// runWarm warms the servers the pending hints call for, one at a time, then again for
// hints that came meanwhile.
func (m *Manager) runWarm() {
	m.mu.Lock()
	w := &m.warm
	w.timer = nil
	if m.closed || w.running || len(w.hints) == 0 {
		m.mu.Unlock()
		return
	}
	hints, files := w.hints, w.files
	w.hints, w.first, w.running = nil, time.Time{}, true
	m.mu.Unlock()

	for _, t := range m.warmTargets(hints) {
		m.warmOne(files, t)
	}

	m.mu.Lock()
	w.running = false
	if len(w.hints) > 0 && w.timer == nil && !m.closed {
		w.timer = time.AfterFunc(m.cfg.WarmDelay, m.runWarm)
	}
	m.mu.Unlock()
}

// warmTargets picks, per language, the first source file the hints show in a project
// of that language.
func (m *Manager) warmTargets(hints []warmHint) []warmTarget {
	var out []warmTarget
	add := func(lang *Language, rel string) {
		for _, t := range out {
			if t.lang == lang {
				return
			}
		}
		out = append(out, warmTarget{lang, rel})
	}
	for _, h := range hints {
		if h.dir {
			for _, t := range m.projectsUnder(h.rel) {
				add(t.lang, t.rel)
			}
			continue
		}
		lang := m.languageOfName(path.Base(h.rel))
		if lang == nil {
			continue
		}
		if isSource(lang, h.rel) {
			if m.markedAbove(lang, path.Dir(h.rel)) {
				add(lang, h.rel)
			}
			continue
		}
		// A marker file: the first source file beneath it.
		if src := m.firstSource(lang, path.Dir(h.rel)); src != "" {
			add(lang, src)
		}
	}
	return out
}

// markedAbove reports whether dir or a directory above it holds one of lang's markers.
func (m *Manager) markedAbove(lang *Language, dir string) bool {
	for {
		for _, mk := range lang.Markers {
			if _, err := os.Lstat(filepath.Join(m.cfg.Root, dir, mk)); err == nil {
				return true
			}
		}
		if dir == "." || dir == "/" || dir == "" {
			return false
		}
		dir = path.Dir(dir)
	}
}

// firstSource is the shallowest of lang's source files under dir, or "".
func (m *Manager) firstSource(lang *Language, dir string) string {
	var found string
	m.scan(dir, func(d string, ents []os.DirEntry, stop *bool) bool {
		for _, e := range ents {
			if e.Type().IsRegular() && isSource(lang, e.Name()) {
				found, *stop = path.Join(d, e.Name()), true
				return false
			}
		}
		return true
	})
	return found
}

// projectsUnder finds the projects an upload into dir shows: for each language, the
// shallowest source file in a directory that holds one of its markers or is beneath
// one (dir's own ancestors count).
func (m *Manager) projectsUnder(dir string) []warmTarget {
	above := map[*Language]bool{}      // a marker in an ancestor of dir
	marked := map[*Language][]string{} // directories under dir that hold a marker
	for i := range m.cfg.Languages {
		lang := &m.cfg.Languages[i]
		above[lang] = dir != "." && m.markedAbove(lang, path.Dir(dir))
	}
	inProject := func(lang *Language, d string) bool {
		if above[lang] {
			return true
		}
		for _, md := range marked[lang] {
			if d == md || md == "." || strings.HasPrefix(d, md+"/") {
				return true
			}
		}
		return false
	}
	var out []warmTarget
	done := map[*Language]bool{}
	m.scan(dir, func(d string, ents []os.DirEntry, stop *bool) bool {
		for _, e := range ents {
			if lang := m.languageOfName(e.Name()); lang != nil && hasName(lang.Markers, e.Name()) {
				marked[lang] = append(marked[lang], d)
			}
		}
		for _, e := range ents {
			if !e.Type().IsRegular() {
				continue
			}
			lang := m.languageOfName(e.Name())
			if lang == nil || done[lang] || !isSource(lang, e.Name()) || !inProject(lang, d) {
				continue
			}
			done[lang] = true
			out = append(out, warmTarget{lang, path.Join(d, e.Name())})
		}
		*stop = len(done) == len(m.cfg.Languages)
		return true
	})
	return out
}

// warmOne starts t's server (unless it runs, or was warmed), opens t's file in it and
// waits for the server to have loaded it.
func (m *Manager) warmOne(files Files, t warmTarget) {
	m.mu.Lock()
	sl := m.slots[t.lang.Name]
	if sl == nil {
		sl = &slot{}
		m.slots[t.lang.Name] = sl
	}
	if m.closed || sl.warmed || sl.srv != nil && !sl.srv.exitedNow() {
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	if _, _, err := m.find(t.lang); err != nil {
		m.mu.Lock()
		sl.warmed = true // no server in this image: nothing to warm, now or later
		m.mu.Unlock()
		return
	}
	if why := m.noRoom(); why != "" {
		m.log.Info("language server not warmed", "language", t.lang.Name, "reason", why)
		return
	}
	m.mu.Lock()
	sl.warmed = true
	m.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), warmTimeout)
	defer cancel()
	go func() { // Close ends a warm-up at once
		select {
		case <-m.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	start := time.Now()
	c := &call{m: m, files: files, texts: map[string]*Text{}, denied: map[string]bool{}}
	_, uri, err := c.open(ctx, t.rel)
	if err == nil {
		err = c.load(ctx, uri)
	}
	if err != nil {
		m.log.Info("language server warm-up failed", "language", t.lang.Name, "file", t.rel, "err", err)
		return
	}
	m.log.Info("language server warmed", "server", c.s.name, "language", t.lang.Name, "file", t.rel, "took", time.Since(start).Round(time.Millisecond))
}

// load waits until the server has loaded the project and checked the open file uri:
// its diagnostics, pulled, or the first it publishes (up to warmTimeout).
func (c *call) load(ctx context.Context, uri string) error {
	if c.s.caps.pullDiagnostics() {
		return c.s.call(ctx, "textDocument/diagnostic", map[string]any{"textDocument": map[string]string{"uri": uri}}, nil)
	}
	_, err := c.s.waitPublished(ctx, uri, warmTimeout)
	return err
}

// noRoom says why the container has no room for another server now, or "".
func (m *Manager) noRoom() string {
	if m.cfg.WarmMemory < 0 {
		return ""
	}
	if limit, used, ok := cgroupMemory(m.cfg.Cgroup); ok && limit-used < m.cfg.WarmMemory {
		return fmt.Sprintf("memory: %d MiB free, %d MiB wanted", (limit-used)>>20, m.cfg.WarmMemory>>20)
	}
	if limit, cur, ok := cgroupPids(m.cfg.Cgroup); ok && limit-cur < warmPids {
		return fmt.Sprintf("pids: %d more allowed, %d wanted", limit-cur, warmPids)
	}
	return ""
}

// cgroupMemory reads the cgroup's memory limit and its use less the page cache it can
// reclaim: cgroup v2 files in dir, else v1's under dir/memory.
func cgroupMemory(dir string) (limit, used int64, ok bool) {
	if limit, ok := cgroupInt(dir, "memory.max"); ok {
		cur, _ := cgroupInt(dir, "memory.current")
		return limit, cur - cgroupStat(dir, "memory.stat", "inactive_file"), true
	}
	if limit, ok := cgroupInt(dir, "memory/memory.limit_in_bytes"); ok {
		cur, _ := cgroupInt(dir, "memory/memory.usage_in_bytes")
		return limit, cur - cgroupStat(dir, "memory/memory.stat", "total_inactive_file"), true
	}
	return 0, 0, false
}

// cgroupPids reads the cgroup's task limit and count (v2, else v1).
func cgroupPids(dir string) (limit, cur int64, ok bool) {
	for _, sub := range []string{"", "pids/"} {
		if limit, ok := cgroupInt(dir, sub+"pids.max"); ok {
			cur, _ := cgroupInt(dir, sub+"pids.current")
			return limit, cur, true
		}
	}
	return 0, 0, false
}

// cgroupInt reads a cgroup file holding one number; "max" (no limit) or no file is !ok.
func cgroupInt(dir, name string) (int64, bool) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// cgroupStat reads one key of a flat-keyed cgroup file (memory.stat); 0 if absent.
func cgroupStat(dir, name, key string) int64 {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == key {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
