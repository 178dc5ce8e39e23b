package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"golang.org/x/sys/unix"
)

// maxLinks bounds symlink hops while resolving one path, as the kernel does (ELOOP).
const maxLinks = 40

// workspace is the directory every path is resolved beneath.
type workspace struct {
	dir  string   // absolute, e.g. /workspace
	root *os.Root // all I/O goes through it: nothing can escape dir
	fd   int      // dir opened O_PATH: the base of openReal (see beneath.go)
}

func openWorkspace(dir string) (*workspace, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open workspace %s: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("open workspace %s: %w", dir, err)
	}
	return &workspace{dir: path.Clean(dir), root: root, fd: fd}, nil
}

// clean turns a request path into a clean workspace-relative one ("." is the root).
// The host has normalised it already; the agent checks again and trusts nothing.
func (w *workspace) clean(p string) (string, error) {
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

// resolve follows every symlink in rel, component by component, and returns the real
// workspace-relative path. A link that leads outside the workspace is a traversal. Missing
// trailing components are kept as written, so a path about to be created resolves too.
func (w *workspace) resolve(rel string) (string, error) {
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

// readDir lists a directory (resolved, real path) sorted by name.
func (w *workspace) readDir(real string) ([]fs.DirEntry, error) {
	d, err := w.openReal(real, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	ents, err := d.ReadDir(-1)
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, err
}

// target is a request path checked and resolved for an operation.
type target struct {
	rel  string // as asked, cleaned
	real string // symlink-resolved
}

// open resolves p fully (following a final symlink) and checks the guard on both the
// asked and the resolved path. write selects the guard's write rules.
func (w *workspace) open(p string, g *guard.Guard, write bool) (target, error) {
	rel, err := w.clean(p)
	if err != nil {
		return target{}, err
	}
	real, err := w.resolve(rel)
	if err != nil {
		return target{}, err
	}
	if err := checkGuard(g, write, rel, real); err != nil {
		return target{}, err
	}
	return target{rel: rel, real: real}, nil
}

// entry resolves p's parent but not its last component, for operations that act on a
// directory entry itself (remove, rename): removing a symlink removes the link.
func (w *workspace) entry(p string, g *guard.Guard) (target, error) {
	rel, err := w.clean(p)
	if err != nil {
		return target{}, err
	}
	if rel == "." {
		return target{}, agent.Errorf(agent.CodeInvalid, rel, "the workspace root itself cannot be removed or moved")
	}
	dir, err := w.resolve(path.Dir(rel))
	if err != nil {
		return target{}, err
	}
	real := path.Join(dir, path.Base(rel))
	if err := checkGuard(g, true, rel, real); err != nil {
		return target{}, err
	}
	return target{rel: rel, real: real}, nil
}

func checkGuard(g *guard.Guard, write bool, paths ...string) error {
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

// wireError turns any error into the wire form with a stable code. Causes of internal
// errors are kept in the message: the host decides what its own clients may see.
func wireError(err error) *agent.WireError {
	var we *agent.WireError
	if errors.As(err, &we) {
		return we
	}
	var d *guard.Denied
	if errors.As(err, &d) {
		return &agent.WireError{Code: agent.CodeDenied, Path: d.Path, Rule: d.Rule, Message: "path not allowed by policy"}
	}
	code := agent.CodeInternal
	switch {
	case errors.Is(err, guard.ErrBadPath):
		code = agent.CodeTraversal
	case errors.Is(err, fs.ErrNotExist):
		code = agent.CodeNotFound
	case errors.Is(err, syscall.ENOTEMPTY): // before ErrExist, which it also matches
		code = agent.CodeNotEmpty
	case errors.Is(err, fs.ErrExist):
		code = agent.CodeExists
	case errors.Is(err, syscall.ENOTDIR):
		code = agent.CodeNotDir
	case errors.Is(err, syscall.EISDIR):
		code = agent.CodeIsDir
	case errors.Is(err, syscall.EFBIG), errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		code = agent.CodeTooLarge
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		code = agent.CodeCanceled
	}
	we = &agent.WireError{Code: code, Message: err.Error()}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		we.Message = pe.Err.Error()
		we.Path = pe.Path
	}
	return we
}
