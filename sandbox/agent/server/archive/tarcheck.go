package archive

import (
	"archive/tar"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
)

// The checks of tar.in on what an entry is called and what it points at.

// entryName cleans an entry's name into an archive path ("." for the root). Absolute
// names and names with a ".." component are traversals: they are refused, not cleaned.
func entryName(raw string) (string, error) {
	switch {
	case raw == "":
		return "", agent.Errorf(agent.CodeInvalid, raw, "empty entry name")
	case strings.ContainsRune(raw, 0):
		return "", agent.Errorf(agent.CodeTraversal, raw, "entry name contains a NUL byte")
	case path.IsAbs(raw):
		return "", agent.Errorf(agent.CodeTraversal, raw, "absolute entry name")
	}
	for _, p := range strings.Split(raw, "/") {
		if p == ".." {
			return "", agent.Errorf(agent.CodeTraversal, raw, "entry name climbs out with ..")
		}
	}
	return path.Clean(raw), nil
}

// linkTarget checks a hard link: its target must be a regular file earlier in the
// archive, and readable under the guard. It returns the target's archive path.
func (x *extraction) linkTarget(hdr *tar.Header) (string, error) {
	target, err := entryName(hdr.Linkname)
	if err != nil {
		return "", agent.Errorf(agent.CodeTraversal, hdr.Name, "hard link target %q is outside the workspace", hdr.Linkname)
	}
	if err := fs.CheckGuard(x.g, false, path.Join(x.base.Rel, target), path.Join(x.base.Real, target)); err != nil {
		return "", entryDenied(hdr.Name, "hard link target", err)
	}
	if x.kinds[target] != kindFile {
		return "", agent.Errorf(agent.CodeInvalid, hdr.Name, "hard link target %q is not a regular file earlier in the archive", hdr.Linkname)
	}
	return target, nil
}

// symlinkTarget checks a symlink at real: its target, resolved lexically from the
// link's directory, must stay inside the workspace and be readable under the guard.
func (x *extraction) symlinkTarget(hdr *tar.Header, real string) error {
	link := hdr.Linkname
	if link == "" || strings.ContainsRune(link, 0) {
		return agent.Errorf(agent.CodeInvalid, hdr.Name, "bad symlink target %q", link)
	}
	dir := x.h.WS.Dir()
	var t string
	if path.IsAbs(link) {
		c := path.Clean(link)
		if c != dir && !strings.HasPrefix(c, dir+"/") {
			return agent.Errorf(agent.CodeTraversal, hdr.Name, "symlink target %q is outside the workspace", link)
		}
		t = strings.TrimPrefix(strings.TrimPrefix(c, dir), "/")
		if t == "" {
			t = "."
		}
	} else {
		t = path.Join(path.Dir(real), link)
		if t == ".." || strings.HasPrefix(t, "../") {
			return agent.Errorf(agent.CodeTraversal, hdr.Name, "symlink target %q is outside the workspace", link)
		}
	}
	if err := fs.CheckGuard(x.g, false, t); err != nil {
		return entryDenied(hdr.Name, "symlink target", err)
	}
	return nil
}

// entryDenied reports a guard refusal of what an entry points at, naming the entry.
func entryDenied(entry, what string, err error) error {
	var d *guard.Denied
	if errors.As(err, &d) {
		return &agent.WireError{Code: agent.CodeDenied, Path: entry, Rule: d.Rule, Message: fmt.Sprintf("%s %s: path not allowed by policy", what, d.Path)}
	}
	return agent.Errorf(agent.CodeTraversal, entry, "%s: %v", what, err)
}
