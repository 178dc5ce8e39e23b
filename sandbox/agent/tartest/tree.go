package tartest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	iofs "io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The round trip of a workspace tree (capture → store → restore) is tested as a
// property: Generate makes a tree of every kind of entry from a seed, Scan reads a tree
// back entry by entry, and Diff compares two scans.

// Node is one entry of a scanned tree.
type Node struct {
	Type   string // "file", "dir", "symlink", "fifo", "socket", "device"
	Mode   uint32 // permission bits with setuid, setgid, sticky
	Size   int64
	MTime  int64  // nanoseconds
	Link   string // a symlink's target
	Sum    string // a file's SHA-256
	Blocks int64  // 512-byte blocks allocated
	Inode  uint64 // for hard links: the same inode within one scan
	Nlink  uint64
}

// Tree is a scanned tree, by path relative to its root.
type Tree map[string]Node

// Generated is what Generate made beyond the tree itself.
type Generated struct {
	Skipped []string // paths that an archive must skip and list (FIFOs)
	Sparse  []string // sparse files
}

// Generate fills dir (empty) with a tree drawn from seed: names of random bytes (not
// UTF-8, newlines, 255-byte names), deep paths, modes, empty directories, symlinks of
// every kind (absolute, outside, dangling, climbing with ..), hard links, sparse
// files, unreadable files and directories, a FIFO; and random mtimes on all of it.
func Generate(dir string, seed uint64) (Generated, error) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var g Generated
	var files []string
	dirs := []string{"."}
	used := map[string]bool{}
	name := func(parent string) string {
		for {
			var n string
			switch r.IntN(8) {
			case 0: // not UTF-8, as a Latin-1 tarball unpacks
				n = "caf" + string([]byte{byte(0xe0 + r.IntN(16))}) + ".txt"
			case 1:
				n = "line\nbreak" + fmt.Sprint(r.IntN(100))
			case 2: // 255 bytes
				n = strings.Repeat(string(rune('a'+r.IntN(26))), 250) + fmt.Sprintf("%05d", r.IntN(100000))
			case 3:
				n = "sp ace é " + fmt.Sprint(r.IntN(1000))
			default:
				b := make([]byte, 1+r.IntN(12))
				for i := range b {
					b[i] = byte(1 + r.IntN(255))
					if b[i] == '/' {
						b[i] = '_'
					}
				}
				n = string(b)
			}
			if n == "." || n == ".." || strings.HasPrefix(n, ".cws-staging-") {
				continue
			}
			p := filepath.Join(parent, n)
			if !used[p] {
				used[p] = true
				return p
			}
		}
	}
	abs := func(p string) string { return filepath.Join(dir, p) }
	// Directories, some deep.
	for range 3 + r.IntN(6) {
		parent := dirs[r.IntN(len(dirs))]
		p := name(parent)
		if err := os.Mkdir(abs(p), 0o755); err != nil {
			return g, err
		}
		dirs = append(dirs, p)
	}
	deep := "."
	for i := range 12 {
		deep = filepath.Join(deep, fmt.Sprintf("d%02d", i))
	}
	if err := os.MkdirAll(abs(deep), 0o755); err != nil {
		return g, err
	}
	dirs = append(dirs, deep)
	// Files.
	for range 5 + r.IntN(20) {
		p := name(dirs[r.IntN(len(dirs))])
		body := make([]byte, r.IntN(3)*r.IntN(70000))
		for i := range body {
			body[i] = byte(r.IntN(256))
		}
		if err := os.WriteFile(abs(p), body, 0o644); err != nil {
			return g, err
		}
		files = append(files, p)
	}
	// Sparse files: a hole, a little data, a hole at the end.
	for range 1 + r.IntN(2) {
		p := name(dirs[r.IntN(len(dirs))])
		f, err := os.Create(abs(p))
		if err != nil {
			return g, err
		}
		size := int64(8<<20 + r.IntN(1<<20))
		_, err = f.WriteAt([]byte("data in the middle of a hole"), int64(r.IntN(4<<20)))
		if err == nil {
			err = f.Truncate(size)
		}
		f.Close()
		if err != nil {
			return g, err
		}
		files = append(files, p)
		g.Sparse = append(g.Sparse, p)
	}
	// A sparse file that is all hole.
	hole := name(dirs[r.IntN(len(dirs))])
	if err := os.WriteFile(abs(hole), nil, 0o644); err != nil {
		return g, err
	}
	if err := os.Truncate(abs(hole), int64(1+r.IntN(16<<20))); err != nil {
		return g, err
	}
	files = append(files, hole)
	g.Sparse = append(g.Sparse, hole)
	// Hard links, within the tree.
	for range r.IntN(3) {
		target := files[r.IntN(len(files))]
		if err := os.Link(abs(target), abs(name(dirs[r.IntN(len(dirs))]))); err != nil {
			return g, err
		}
	}
	// Symlinks of every kind: data, never followed.
	targets := []string{"/usr/bin/python3", "/etc/passwd", "../../../outside", "nowhere/at/all", "..", "/", files[0], "./" + files[len(files)-1]}
	for _, t := range targets {
		if err := os.Symlink(t, abs(name(dirs[r.IntN(len(dirs))]))); err != nil {
			return g, err
		}
	}
	// A FIFO: skipped, and listed.
	fifo := name(dirs[r.IntN(len(dirs))])
	if err := unix.Mkfifo(abs(fifo), 0o644); err != nil {
		return g, err
	}
	g.Skipped = append(g.Skipped, fifo)
	// Empty directories.
	for range 1 + r.IntN(3) {
		if err := os.Mkdir(abs(name(dirs[r.IntN(len(dirs))])), 0o755); err != nil {
			return g, err
		}
	}
	// Modes, then mtimes, deepest first (a mode may forbid what follows).
	fileModes := []uint32{0o644, 0o755, 0o600, 0o400, 0o000, 0o640, 0o4755, 0o444}
	for _, f := range files {
		if err := unix.Chmod(abs(f), fileModes[r.IntN(len(fileModes))]); err != nil {
			return g, err
		}
	}
	var all []string
	err := filepath.WalkDir(dir, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			all = append(all, p)
		}
		return nil
	})
	if err != nil {
		return g, err
	}
	slices.SortFunc(all, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	dirModes := []uint32{0o755, 0o700, 0o750, 0o555, 0o500, 0o1777, 0o2755}
	for _, p := range all {
		fi, err := os.Lstat(p)
		if err != nil {
			return g, err
		}
		t := time.Unix(int64(1e9+r.IntN(8e8)), int64(r.IntN(1e9)))
		ts := []unix.Timespec{unix.NsecToTimespec(t.UnixNano()), unix.NsecToTimespec(t.UnixNano())}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return g, err
		}
		if fi.IsDir() && r.IntN(3) == 0 {
			if err := unix.Chmod(p, dirModes[r.IntN(len(dirModes))]); err != nil {
				return g, err
			}
		}
	}
	return g, nil
}

// Scan reads the tree under dir entry by entry, without following links.
func Scan(dir string) (Tree, error) {
	t := Tree{}
	err := filepath.WalkDir(dir, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if strings.HasPrefix(filepath.Base(p), ".cws-staging-") {
			return fmt.Errorf("staging directory %s left behind", rel)
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		n := Node{Mode: st.Mode & 0o7777, Size: st.Size, MTime: st.Mtim.Nano(), Blocks: st.Blocks, Inode: st.Ino, Nlink: uint64(st.Nlink)}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			n.Type, n.Size, n.Blocks = "dir", 0, 0
		case syscall.S_IFLNK:
			n.Type, n.Mode = "symlink", 0
			if n.Link, err = os.Readlink(p); err != nil {
				return err
			}
		case syscall.S_IFREG:
			n.Type = "file"
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
			n.Sum = hex.EncodeToString(h.Sum(nil))
		case syscall.S_IFIFO:
			n.Type = "fifo"
		case syscall.S_IFSOCK:
			n.Type = "socket"
		default:
			n.Type = "device"
		}
		t[rel] = n
		return nil
	})
	return t, err
}

// Diff compares a restored tree with the original entry by entry: every entry of want
// but those in skip, with its type, mode, size, mtime, link target and contents; hard
// links linked alike; a sparse file taking no more blocks than it did. It returns one
// line per difference.
func Diff(want, got Tree, skip []string) []string {
	var out []string
	inodes := map[uint64]uint64{} // want's inode → got's
	for _, p := range slices.Sorted(mapsKeys(want)) {
		w := want[p]
		g, ok := got[p]
		if slices.Contains(skip, p) {
			if ok {
				out = append(out, fmt.Sprintf("%q: a %s was restored; it should have been skipped", p, w.Type))
			}
			continue
		}
		if !ok {
			out = append(out, fmt.Sprintf("%q: missing (a %s)", p, w.Type))
			continue
		}
		if w.Type != g.Type || w.Mode != g.Mode || w.Size != g.Size || w.Link != g.Link || w.Sum != g.Sum {
			out = append(out, fmt.Sprintf("%q: got %s %o size %d link %q sum %.8s, want %s %o size %d link %q sum %.8s",
				p, g.Type, g.Mode, g.Size, g.Link, g.Sum, w.Type, w.Mode, w.Size, w.Link, w.Sum))
		}
		if w.MTime != g.MTime {
			out = append(out, fmt.Sprintf("%q: mtime %s, want %s", p, time.Unix(0, g.MTime).UTC(), time.Unix(0, w.MTime).UTC()))
		}
		if w.Type == "file" {
			if g.Blocks > w.Blocks+16 {
				out = append(out, fmt.Sprintf("%q: %d blocks allocated, the original %d (a sparse file written dense?)", p, g.Blocks, w.Blocks))
			}
			if w.Nlink > 1 {
				if prev, seen := inodes[w.Inode]; seen && prev != g.Inode {
					out = append(out, fmt.Sprintf("%q: hard link restored as a copy", p))
				}
				inodes[w.Inode] = g.Inode
			}
			if w.Nlink != g.Nlink {
				out = append(out, fmt.Sprintf("%q: %d links, want %d", p, g.Nlink, w.Nlink))
			}
		}
	}
	for _, p := range slices.Sorted(mapsKeys(got)) {
		if _, ok := want[p]; !ok {
			out = append(out, fmt.Sprintf("%q: restored, but not in the original", p))
		}
	}
	return out
}

func mapsKeys(t Tree) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range t {
			if !yield(k) {
				return
			}
		}
	}
}
