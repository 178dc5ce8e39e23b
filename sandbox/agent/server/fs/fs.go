// Package fs serves the file operations of package agent (stat, read, write, remove,
// rename, mkdir, list, check) and holds the Workspace they and every other operation
// resolve paths beneath.
//
// Every path is resolved beneath the workspace through an os.Root, so no spelling and no
// symlink can reach outside it; the optional guard of each request is checked again on
// the symlink-resolved path.
package fs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"golang.org/x/sys/unix"
)

// maxLinks bounds symlink hops while resolving one path, as the kernel does (ELOOP).
const maxLinks = 40

// Workspace is the directory every path is resolved beneath.
type Workspace struct {
	dir  string   // absolute, e.g. /workspace
	root *os.Root // all I/O goes through it: nothing can escape dir
	fd   int      // dir opened O_PATH: the base of OpenReal (see beneath.go)
}

// OpenWorkspace opens dir as a Workspace.
func OpenWorkspace(dir string) (*Workspace, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open workspace %s: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("open workspace %s: %w", dir, err)
	}
	return &Workspace{dir: path.Clean(dir), root: root, fd: fd}, nil
}

// FromFD makes a Workspace of dir, already open as fd (O_PATH), through /proc: a
// workspace directory handed over by another process.
func FromFD(dir string, fd int) (*Workspace, error) {
	root, err := os.OpenRoot("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return nil, err
	}
	return &Workspace{dir: path.Clean(dir), root: root, fd: fd}, nil
}

// Dir is the workspace directory, absolute and clean.
func (w *Workspace) Dir() string { return w.dir }

// Root is the os.Root all of the workspace's I/O goes through.
func (w *Workspace) Root() *os.Root { return w.root }

// FD is the workspace directory opened O_PATH.
func (w *Workspace) FD() int { return w.fd }

// Clean turns a request path into a clean workspace-relative one ("." is the root).
// The host has normalised it already; the agent checks again and trusts nothing.
func (w *Workspace) Clean(p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", agent.Errorf(agent.CodeTraversal, "", "path contains a NUL byte")
	}
	if path.IsAbs(p) {
		c := path.Clean(p)
		if c != w.dir && !strings.HasPrefix(c, w.dir+"/") {
			return "", agent.Errorf(agent.CodeTraversal, p, "absolute path outside the workspace")
		}
		p = strings.TrimPrefix(strings.TrimPrefix(c, w.dir), "/")
	}
	c := path.Clean("./" + p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", agent.Errorf(agent.CodeTraversal, p, "path escapes the workspace")
	}
	return c, nil
}

// Resolve follows every symlink in rel, component by component, and returns the real
// workspace-relative path. A link that leads outside the workspace is a traversal. Missing
// trailing components are kept as written, so a path about to be created resolves too.
func (w *Workspace) Resolve(rel string) (string, error) {
	if w.linkFree(rel) {
		return rel, nil
	}
	var out []string
	parts := strings.Split(rel, "/")
	hops := 0
	for len(parts) > 0 {
		p := parts[0]
		parts = parts[1:]
		switch p {
		case "", ".":
			continue
		case "..":
			if len(out) == 0 {
				return "", agent.Errorf(agent.CodeTraversal, rel, "path escapes the workspace")
			}
			out = out[:len(out)-1]
			continue
		}
		cand := path.Join(append(out, p)...)
		fi, err := w.root.Lstat(cand)
		if errors.Is(err, fs.ErrNotExist) {
			out = append(out, p)
			continue // the rest is resolved lexically, below a directory that isn't there
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			out = append(out, p)
			continue
		}
		if hops++; hops > maxLinks {
			return "", agent.Errorf(agent.CodeInvalid, rel, "too many levels of symbolic links")
		}
		target, err := w.root.Readlink(cand)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			t := path.Clean(target)
			if t != w.dir && !strings.HasPrefix(t, w.dir+"/") {
				return "", agent.Errorf(agent.CodeTraversal, rel, "symlink %s points outside the workspace", cand)
			}
			out = nil
			target = strings.TrimPrefix(strings.TrimPrefix(t, w.dir), "/")
		}
		parts = append(strings.Split(target, "/"), parts...)
	}
	if len(out) == 0 {
		return ".", nil
	}
	return path.Join(out...), nil
}

// linkFree reports that rel, a clean relative path, exists beneath the workspace
// without a symlink in any component, in one openat2: then it is its own resolution,
// and Resolve need not look at each component (which costs a few syscalls each).
// Anything else (a link, a missing part, no openat2) takes the component walk.
func (w *Workspace) linkFree(rel string) bool {
	if rel == "." {
		return true
	}
	if NoOpenat2.Load() || rel == "" || rel != path.Clean(rel) || path.IsAbs(rel) || rel == ".." ||
		strings.HasPrefix(rel, "../") || strings.Contains(rel, "/../") || strings.HasSuffix(rel, "/..") {
		return false
	}
	fd, err := unix.Openat2(w.fd, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolveFlags})
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// ReadDir lists a directory (resolved, real path) sorted by name.
func (w *Workspace) ReadDir(real string) ([]fs.DirEntry, error) {
	d, err := w.OpenReal(real, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	ents, err := d.ReadDir(-1)
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, err
}

// Target is a request path checked and resolved for an operation.
type Target struct {
	Rel  string // as asked, cleaned
	Real string // symlink-resolved
}

// Open resolves p fully (following a final symlink) and checks the guard on both the
// asked and the resolved path. write selects the guard's write rules.
func (w *Workspace) Open(p string, g *guard.Guard, write bool) (Target, error) {
	rel, err := w.Clean(p)
	if err != nil {
		return Target{}, err
	}
	real, err := w.Resolve(rel)
	if err != nil {
		return Target{}, err
	}
	if err := CheckGuard(g, write, rel, real); err != nil {
		return Target{}, err
	}
	return Target{Rel: rel, Real: real}, nil
}

// Entry resolves p's parent but not its last component, for operations that act on a
// directory entry itself (remove, rename): removing a symlink removes the link.
func (w *Workspace) Entry(p string, g *guard.Guard) (Target, error) {
	rel, err := w.Clean(p)
	if err != nil {
		return Target{}, err
	}
	if rel == "." {
		return Target{}, agent.Errorf(agent.CodeInvalid, rel, "the workspace root itself cannot be removed or moved")
	}
	dir, err := w.Resolve(path.Dir(rel))
	if err != nil {
		return Target{}, err
	}
	real := path.Join(dir, path.Base(rel))
	if err := CheckGuard(g, true, rel, real); err != nil {
		return Target{}, err
	}
	return Target{Rel: rel, Real: real}, nil
}

// CheckGuard checks each path against the guard, under its write rules when write is
// set; a nil guard allows everything.
func CheckGuard(g *guard.Guard, write bool, paths ...string) error {
	if g == nil {
		return nil
	}
	for _, p := range paths {
		var err error
		if write {
			err = g.CheckWrite(p)
		} else {
			err = g.Check(p)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
