package fs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"golang.org/x/sys/unix"
)

// The agent checks the policy on a path it resolved itself (symlinks followed one by
// one), then has to open that path. Between the two, whoever runs commands in the
// workspace may swap an entry: a file for a symlink to .env, a directory for a symlink to
// secrets/. So the resolved path is opened without following ANY symlink
// (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, or openat O_NOFOLLOW component by
// component where openat2 is missing): what is opened is exactly what was checked, or the
// open fails with ELOOP and the whole resolve-check-open is tried again.

// resolveFlags make openat2 refuse every symlink and every ".." escape.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// swapRetries is how often a path that changed between check and open is resolved and
// checked again before the call fails.
const swapRetries = 3

// NoOpenat2 forces the component-by-component fallback (tests; kernels before 5.6, or
// a seccomp profile without openat2).
var NoOpenat2 atomic.Bool

// OpenReal opens real, a resolved workspace-relative path, beneath the workspace root
// without following any symlink on the way or at the end.
func (w *Workspace) OpenReal(real string, flags int, mode uint32) (*os.File, error) {
	flags |= unix.O_CLOEXEC
	if !NoOpenat2.Load() {
		fd, err := unix.Openat2(w.fd, real, &unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode), Resolve: resolveFlags})
		for err == unix.EINTR || err == unix.EAGAIN {
			fd, err = unix.Openat2(w.fd, real, &unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode), Resolve: resolveFlags})
		}
		if err != unix.ENOSYS && err != unix.EPERM {
			if err != nil {
				return nil, &fs.PathError{Op: "open", Path: real, Err: err}
			}
			return os.NewFile(uintptr(fd), filepath.Join(w.dir, real)), nil
		}
		NoOpenat2.Store(true) // seccomp or an old kernel: fall back for good
	}
	return w.openWalk(real, flags, mode)
}

// openWalk is OpenReal's fallback: each directory is opened O_NOFOLLOW relative to the
// previous one, so a symlink anywhere fails with ELOOP (or ENOTDIR) as openat2 would.
func (w *Workspace) openWalk(real string, flags int, mode uint32) (*os.File, error) {
	dir, err := unix.Dup(w.fd)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(real, "/")
	if real == "." {
		parts = []string{"."}
	}
	for i, p := range parts {
		if p == ".." {
			unix.Close(dir)
			return nil, &fs.PathError{Op: "open", Path: real, Err: unix.EXDEV}
		}
		last := i == len(parts)-1
		fl := unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if last {
			fl = flags | unix.O_NOFOLLOW
		}
		fd, err := unix.Openat(dir, p, fl, mode)
		unix.Close(dir)
		if err != nil {
			if err == unix.ENOTDIR && !last {
				err = unix.ELOOP // a directory became a symlink (or a file)
			}
			return nil, &fs.PathError{Op: "open", Path: real, Err: err}
		}
		dir = fd
	}
	return os.NewFile(uintptr(dir), filepath.Join(w.dir, real)), nil
}

// swapped reports whether an open failed because an entry changed into a symlink after
// the path was checked.
func swapped(err error) bool { return errors.Is(err, unix.ELOOP) }

// OpenChecked resolves p, checks the guard on the asked and the resolved path, and opens
// the resolved path with flags without following any link, retrying when the path changed
// in between. A regular file with more than one link is refused where the guard denies
// anything (see CheckLinks).
func (w *Workspace) OpenChecked(p string, g *guard.Guard, write bool, flags int, mode uint32) (Target, *os.File, error) {
	for try := 0; ; try++ {
		t, err := w.Open(p, g, write)
		if err != nil {
			return Target{}, nil, err
		}
		f, err := w.OpenReal(t.Real, flags, mode)
		if swapped(err) && try < swapRetries {
			continue
		}
		if swapped(err) {
			return t, nil, agent.Errorf(agent.CodeDenied, t.Rel, "the path keeps changing while it is opened (a symlink was swapped in)")
		}
		if err != nil {
			return t, nil, err
		}
		if err := CheckLinks(f, g, t.Rel); err != nil {
			f.Close()
			return t, nil, err
		}
		return t, f, nil
	}
}

// OpenParent opens the directory that will hold t.Real's last component, creating it
// (and its parents) when mkdirs is set, without following any link. It returns the
// directory and the entry's name in it.
func (w *Workspace) OpenParent(t Target, mkdirs bool) (*os.File, string, error) {
	dir, base := path.Dir(t.Real), path.Base(t.Real)
	if mkdirs {
		if err := w.MkdirAll(dir); err != nil {
			return nil, "", err
		}
	}
	d, err := w.OpenReal(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", agent.Errorf(agent.CodeNotFound, path.Dir(t.Rel), "parent directory does not exist")
	}
	if err != nil {
		return nil, "", err
	}
	return d, base, nil
}

// MkdirAll creates real and its missing parents one component at a time, each relative
// to its parent opened without following links: a directory swapped for a symlink fails
// instead of being created through.
func (w *Workspace) MkdirAll(real string) error {
	if real == "." {
		return nil
	}
	d, err := w.OpenReal(".", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	for _, p := range strings.Split(real, "/") {
		if err := unix.Mkdirat(int(d.Fd()), p, 0o755); err != nil && err != unix.EEXIST {
			d.Close()
			return &fs.PathError{Op: "mkdir", Path: real, Err: err}
		}
		fd, err := unix.Openat(int(d.Fd()), p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		d.Close()
		if err != nil {
			if err == unix.ENOTDIR {
				err = syscall.ENOTDIR
			}
			return &fs.PathError{Op: "mkdir", Path: real, Err: err}
		}
		d = os.NewFile(uintptr(fd), p)
	}
	d.Close()
	return nil
}

// CheckLinks refuses a regular file with more than one link when the guard denies
// anything. A hard link is the same file under a second name: `ln .env notes.txt` would
// otherwise hand out .env's inode under an allowed name. Finding a link's other names
// takes a walk of the whole workspace, and an inode's set of names can change between
// that walk and the open, so the rule is decided on the open file alone: where the
// policy denies paths, multiply-linked files are denied under every name.
func CheckLinks(f *os.File, g *guard.Guard, rel string) error {
	if g == nil || len(g.Deny) == 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	return linkRule(&st, rel)
}

// linkRule is CheckLinks on a stat result.
func linkRule(st *unix.Stat_t, rel string) error {
	if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1 {
		return &agent.WireError{Code: agent.CodeDenied, Path: rel, Rule: guard.RuleDenied,
			Message: fmt.Sprintf("file has %d hard links: where deniedPaths are set, a file with more than one name is refused (it may be a denied file under another name)", st.Nlink)}
	}
	return nil
}

// Denies reports whether the guard denies anything, which turns on the hard-link rule.
func Denies(g *guard.Guard) bool { return g != nil && len(g.Deny) > 0 }
