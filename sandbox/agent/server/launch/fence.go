package launch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// A Fence keeps a domain's processes from writing beneath some directories: the
// agent's own (its binary, its socket directory, its state), when the agent shares the
// tools' uid and no file mode can tell them apart (same-uid mode).
//
// Landlock grants, it never excepts: a right granted on a directory holds for
// everything beneath it. So a ruleset with a Fence handles every right that changes
// the file system (write, truncate, make, remove, link or rename into) and grants them
// on the complement of the fenced directories: every entry of "/" but the one on the
// way to a fenced directory, every entry of that one but the next, and so on down.
// Inside a fenced directory nothing may be written; a process may still read there
// and connect to a socket there (the agent's sockets prove their peers). Next to the
// way down, nothing can be created either: on a pod's read-only root that is no loss.
// Symlinks are never granted through: the file they lead to is granted, or not, where
// it really is.
type Fence struct {
	fenced   []string // absolute, cleaned, symlinks resolved
	writable []string // where the write rights are granted
}

// NewFence returns the fence around dirs (each absolute; one that does not exist yet is
// fenced by its name, as it will be when made). It reads the directories on the way
// down to them once: what is made there later is not granted.
func NewFence(dirs ...string) (*Fence, error) {
	if len(dirs) == 0 {
		return nil, errors.New("landlock: a fence needs a directory to fence")
	}
	f := &Fence{}
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			return nil, fmt.Errorf("landlock: fence %q: not an absolute path", d)
		}
		d = filepath.Clean(d)
		if real, err := filepath.EvalSymlinks(d); err == nil {
			d = real
		}
		if d == "/" {
			return nil, errors.New("landlock: fence /: nothing would be writable")
		}
		if !slices.Contains(f.fenced, d) {
			f.fenced = append(f.fenced, d)
		}
	}
	if err := f.grant("/"); err != nil {
		return nil, err
	}
	return f, nil
}

// grant adds every entry of dir that is neither fenced nor on the way to a fenced
// directory to f.writable, and descends into those on the way.
func (f *Fence) grant(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("landlock: fence: %w", err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		switch {
		case e.Type()&os.ModeSymlink != 0:
			// Granted where it leads, or not: never through the link.
		case f.isFenced(p):
		case f.onTheWay(p):
			if err := f.grant(p); err != nil {
				return err
			}
		default:
			f.writable = append(f.writable, p)
		}
	}
	return nil
}

// isFenced reports whether p is a fenced directory or beneath one.
func (f *Fence) isFenced(p string) bool {
	return slices.ContainsFunc(f.fenced, func(d string) bool { return within(p, d) })
}

// onTheWay reports whether a fenced directory lies beneath p.
func (f *Fence) onTheWay(p string) bool {
	return slices.ContainsFunc(f.fenced, func(d string) bool { return d != p && within(d, p) })
}

// within reports whether p is dir or beneath it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/") || dir == "/"
}

// Fenced returns the fenced directories; none for a nil Fence.
func (f *Fence) Fenced() []string {
	if f == nil {
		return nil
	}
	return slices.Clone(f.fenced)
}

// Writable returns where the fence lets a process write (the complement of Fenced).
func (f *Fence) Writable() []string { return slices.Clone(f.writable) }

// writeRights are the rights a fence handles at Landlock ABI abi: everything that
// changes the file system but moving between directories (REFER, which a ruleset
// grants on "/" anyway: it never lets anything be made or removed by itself).
func writeRights(abi int) uint64 {
	r := uint64(ll.AccessFSWriteFile | ll.AccessFSRemoveDir | ll.AccessFSRemoveFile |
		ll.AccessFSMakeChar | ll.AccessFSMakeDir | ll.AccessFSMakeReg | ll.AccessFSMakeSock |
		ll.AccessFSMakeFifo | ll.AccessFSMakeBlock | ll.AccessFSMakeSym)
	if abi >= 3 {
		r |= ll.AccessFSTruncate
	}
	return r
}

// fileRights are the write rights that apply to a file (not a directory).
const fileRights = uint64(ll.AccessFSWriteFile | ll.AccessFSTruncate)

// apply grants the write rights on the fence's writable paths to r, a ruleset that
// handles them. A path gone since the fence was made is skipped.
func (f *Fence) apply(r *Ruleset, abi int) error {
	rights := writeRights(abi)
	for _, p := range f.writable {
		access := rights
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink != 0 {
			continue // gone, or replaced by a link since the fence was made: never granted through
		}
		if !fi.IsDir() {
			access &= fileRights // a rule on a file may grant only what applies to files
		}
		if err := r.allow(p, access); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return err
		}
	}
	return nil
}
