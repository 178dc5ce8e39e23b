package lsp

import (
	"context"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Servers read the files nobody opened from disk themselves, and learn that one changed
// only from the client (workspace/didChangeWatchedFiles): the agent has no file watcher,
// so before each request it compares the requested file's directory (its package, for Go)
// with what it saw there last time and reports the files of the language that were
// created, changed or deleted since. Changes elsewhere reach the server when a request
// touches their directory.

// maxWatchedDir bounds the entries of one directory compared per request.
const maxWatchedDir = 5000

// stamp is what tells a file changed without reading it.
type stamp struct {
	size  int64
	mtime time.Time
}

func (c *call) watch(ctx context.Context, lang *Language, rel string) error {
	dir := path.Dir(rel)
	d, err := os.Open(filepath.Join(c.m.cfg.Root, dir))
	if err != nil {
		return nil
	}
	defer d.Close()
	ents, err := d.ReadDir(maxWatchedDir + 1)
	if (err != nil && err != io.EOF) || len(ents) > maxWatchedDir {
		return nil
	}
	now := make(map[string]stamp, len(ents))
	for _, e := range ents {
		if !e.Type().IsRegular() || !watched(lang, e.Name()) {
			continue
		}
		// Relative to the directory: one component to look up, not the whole path.
		var st unix.Stat_t
		if unix.Fstatat(int(d.Fd()), e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			now[e.Name()] = stamp{st.Size, time.Unix(st.Mtim.Unix())}
		}
	}
	s := c.s
	s.mu.Lock()
	old, seen := s.dirs[dir]
	s.dirs[dir] = now
	open := map[string]bool{}
	for u := range s.docs {
		open[u] = true
	}
	s.mu.Unlock()
	if !seen {
		return nil
	}
	type event struct {
		URI  string `json:"uri"`
		Type int    `json:"type"` // 1 created, 2 changed, 3 deleted
	}
	var events []event
	add := func(name string, typ int) {
		if uri := c.m.serverURI(path.Join(dir, name)); !open[uri] {
			events = append(events, event{uri, typ})
		}
	}
	for name, st := range now {
		if o, ok := old[name]; !ok {
			add(name, 1)
		} else if o != st {
			add(name, 2)
		}
	}
	for name := range old {
		if _, ok := now[name]; !ok {
			add(name, 3)
		}
	}
	if len(events) == 0 {
		return nil
	}
	// Any file's diagnostics may change now: get_diagnostics waits for a publish after
	// this (counted before sending, so a quick publish is not taken for an older one).
	s.mu.Lock()
	s.seq++
	s.watchSeq = s.seq
	s.mu.Unlock()
	return s.notify(ctx, "workspace/didChangeWatchedFiles", map[string]any{"changes": events})
}

// watched reports whether a file name matters to lang's server: its source files and
// its marker files (go.mod, package.json, …).
func watched(lang *Language, name string) bool {
	if _, ok := lang.Exts[strings.ToLower(path.Ext(name))]; ok {
		return true
	}
	for _, m := range lang.Markers {
		if m == name {
			return true
		}
	}
	return name == "go.sum" && lang.Exts[".go"] != ""
}
