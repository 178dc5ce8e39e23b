package lsp

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent"
)

// Files reads workspace files for the manager. The agent implements it with its own
// path resolution and guard, so every file a request syncs or a result points into is
// checked like any file tool's.
type Files interface {
	// Read returns the content of the workspace file rel (clean, slash-separated,
	// relative). A path the guard refuses fails with an error matching agent.ErrDenied
	// or agent.ErrTraversal.
	Read(rel string) ([]byte, error)
}

// refused reports whether a read failed because the policy refuses the path.
func refused(err error) bool {
	return errors.Is(err, agent.ErrDenied) || errors.Is(err, agent.ErrTraversal)
}

// maxOutsideFile bounds a file outside the workspace read for position conversion.
const maxOutsideFile = 32 << 20

// call is one tool call's view: the server, the files it read, and how many locations
// were left out.
type call struct {
	m       *Manager
	s       *server
	files   Files
	texts   map[string]*Text // by server URI; nil for a file that could not be read
	denied  map[string]bool  // workspace files the guard refused, by rel
	dropped int
	// wide: the request looks across files (references, rename, call hierarchy), so a
	// configless project's files are opened first, new ones too (project.go).
	wide bool
}

// place is where a server URI points, as the call sees it.
type place struct {
	rel     string // workspace-relative, when in the workspace
	abs     string // absolute, when outside
	display string // the URI results show
}

// locate maps a server URI to a workspace file or an outside one.
func (c *call) locate(uri string) (place, bool) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" {
		return place{}, false
	}
	p := path.Clean(u.Path)
	if rel, ok := c.m.relative(p); ok {
		return place{rel: rel, display: fileURI(path.Join(c.m.cfg.DisplayRoot, rel))}, true
	}
	// Outside the workspace: a stdlib or module-cache file. If it is a link into the
	// workspace, it is judged as the workspace file it is.
	if real, err := filepath.EvalSymlinks(p); err == nil {
		if rel, ok := c.m.relative(real); ok {
			return place{rel: rel, display: fileURI(path.Join(c.m.cfg.DisplayRoot, rel))}, true
		}
	}
	return place{abs: p, display: fileURI(p)}, true
}

// relative returns abs's workspace-relative path, if abs is in the workspace.
func (m *Manager) relative(abs string) (string, bool) {
	for _, root := range []string{m.cfg.Root, m.realRoot} {
		if abs == root {
			return ".", true
		}
		if strings.HasPrefix(abs, root+"/") {
			return abs[len(root)+1:], true
		}
	}
	return "", false
}

// serverURI is the URI the server knows a workspace file by.
func (m *Manager) serverURI(rel string) string { return fileURI(path.Join(m.cfg.Root, rel)) }

// fromDisplay maps a URI a client passes back (as results showed it) to the server's.
func (m *Manager) fromDisplay(uri string) (string, error) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" {
		return "", agent.Errorf(agent.CodeInvalid, "", "not a file URI: %q", uri)
	}
	p := path.Clean(u.Path)
	if p == m.cfg.DisplayRoot || strings.HasPrefix(p, m.cfg.DisplayRoot+"/") {
		return m.serverURI(strings.TrimPrefix(strings.TrimPrefix(p, m.cfg.DisplayRoot), "/")), nil
	}
	return fileURI(p), nil
}

// text returns the text a server URI points at, for converting its positions. ok is
// false when the location must be left out: the guard refuses its workspace file. A file
// that cannot be read gives a nil *Text (positions are converted as if ASCII).
func (c *call) text(uri string) (*Text, place, bool) {
	pl, ok := c.locate(uri)
	if !ok {
		return nil, place{display: uri}, true
	}
	if t, seen := c.texts[uri]; seen {
		return t, pl, !c.denied[pl.rel]
	}
	var t *Text
	if pl.rel != "" {
		src, err := c.files.Read(pl.rel)
		if refused(err) {
			c.texts[uri] = nil
			c.denied[pl.rel] = true
			return nil, pl, false
		}
		if err == nil {
			t = NewText(src)
		}
	} else if f, err := os.Open(pl.abs); err == nil {
		src, err := io.ReadAll(io.LimitReader(f, maxOutsideFile))
		f.Close()
		if err == nil {
			t = NewText(src)
		}
	}
	c.texts[uri] = t
	return t, pl, true
}

// span converts a server range with t (nil: ASCII assumed).
func (c *call) span(t *Text, r Range) Span {
	if t == nil {
		return Span{Start: Pos{r.Start.Line + 1, r.Start.Character + 1}, End: Pos{r.End.Line + 1, r.End.Character + 1}}
	}
	return t.SpanFromLSP(r, c.s.enc)
}

// open reads a workspace file, finds its language's server (starting it), and brings the
// server's view of it, and of every other file it has open, up to date with the disk.
func (c *call) open(ctx context.Context, rel string) (*Text, string, error) {
	lang, langID, err := c.m.languageOf(rel)
	if err != nil {
		return nil, "", err
	}
	src, err := c.files.Read(rel)
	if err != nil {
		return nil, "", err
	}
	s, err := c.m.get(ctx, lang)
	if err != nil {
		return nil, "", err
	}
	c.s = s
	uri := c.m.serverURI(rel)
	if err := c.watch(ctx, lang, rel); err != nil {
		return nil, "", err
	}
	if err := c.openProject(ctx, lang); err != nil {
		return nil, "", err
	}
	if err := c.sync(ctx, uri, rel, langID, src); err != nil {
		return nil, "", err
	}
	t := NewText(src)
	c.texts[uri] = t
	return t, uri, nil
}

// sync tells the server about rel's content (didOpen, or didChange when it changed) and
// re-checks the other open files: changed ones get a didChange, gone or refused ones a
// didClose. Files change on disk through other tools, so this runs before each request.
func (c *call) sync(ctx context.Context, uri, rel, langID string, src []byte) error {
	s := c.s
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if err := c.syncOne(ctx, uri, rel, langID, src); err != nil {
		return err
	}
	s.mu.Lock()
	others := make([]*document, 0, len(s.docs))
	uris := make([]string, 0, len(s.docs))
	for u, d := range s.docs {
		if u != uri {
			others = append(others, d)
			uris = append(uris, u)
		}
	}
	s.mu.Unlock()
	for i, d := range others {
		src, err := c.files.Read(d.rel)
		if err != nil {
			if err := c.close(ctx, uris[i]); err != nil {
				return err
			}
			continue
		}
		if err := c.syncOne(ctx, uris[i], d.rel, "", src); err != nil {
			return err
		}
	}
	return c.evict(ctx)
}

func (c *call) syncOne(ctx context.Context, uri, rel, langID string, src []byte) error {
	s := c.s
	s.mu.Lock()
	if d := s.docs[uri]; d != nil && sameSlice(d.src, src) {
		// The very bytes synced last time (the Files cache hands out one slice per
		// unchanged file): nothing to hash or send.
		s.seqUse(d)
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	sum := sha256.Sum256(src)
	s.mu.Lock()
	d := s.docs[uri]
	if d != nil && d.hash == sum {
		d.src = src
		s.seqUse(d)
		s.mu.Unlock()
		return nil
	}
	s.seq++
	if d == nil {
		d = &document{rel: rel, version: 1, hash: sum, seq: s.seq, src: src}
		s.docs[uri] = d
	} else {
		d.version++
		d.hash, d.seq, d.src = sum, s.seq, src
	}
	s.seqUse(d)
	version := d.version
	s.mu.Unlock()
	if version == 1 {
		return s.notify(ctx, "textDocument/didOpen", map[string]any{
			"textDocument": map[string]any{"uri": uri, "languageId": langID, "version": 1, "text": string(src)},
		})
	}
	return s.notify(ctx, "textDocument/didChange", map[string]any{
		"textDocument":   map[string]any{"uri": uri, "version": version},
		"contentChanges": []map[string]string{{"text": string(src)}},
	})
}

// seqUse marks d as just used, for eviction. Called with s.mu.
func (s *server) seqUse(d *document) { s.useClock++; d.used = s.useClock }

func (c *call) close(ctx context.Context, uri string) error {
	s := c.s
	s.mu.Lock()
	delete(s.docs, uri)
	s.mu.Unlock()
	return s.notify(ctx, "textDocument/didClose", map[string]any{"textDocument": map[string]string{"uri": uri}})
}

// evict closes the least recently used documents beyond the limit.
func (c *call) evict(ctx context.Context) error {
	s := c.s
	s.mu.Lock()
	over := len(s.docs) - c.m.cfg.MaxOpenDocuments
	var victims []string
	if over > 0 {
		type du struct {
			uri  string
			used uint64
		}
		all := make([]du, 0, len(s.docs))
		for u, d := range s.docs {
			all = append(all, du{u, d.used})
		}
		sort.Slice(all, func(i, j int) bool { return all[i].used < all[j].used })
		for _, v := range all[:over] {
			victims = append(victims, v.uri)
		}
	}
	s.mu.Unlock()
	for _, u := range victims {
		if err := c.close(ctx, u); err != nil {
			return err
		}
	}
	return nil
}

// sameSlice reports whether a and b are the same bytes in memory (not just equal).
func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && len(a) > 0 && &a[0] == &b[0]
}
