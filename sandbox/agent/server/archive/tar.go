// Package archive serves tar.out and tar.in of package agent: a directory of the
// workspace streamed out as a tar archive, and an archive extracted into one, checked
// whole before anything lands.
package archive

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	iofs "io/fs"
	"log/slog"
	"os"
	"path"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
	"golang.org/x/sys/unix"
)

// Handlers serves the archive operations on a workspace.
type Handlers struct {
	WS  *fs.Workspace
	Log *slog.Logger
	// Wrote, if set, is told of each accepted upload (rel is the directory it went
	// into), under the writer's guard. It must return at once.
	Wrote func(rel string, g *guard.Guard, dir bool)

	sums sumCache // what exact captures sent whole, for TarOutArgs.Refs
}

// eventWriter turns writes into data events, in chunks.
type eventWriter struct{ r *op.Responder }

func (w eventWriter) Write(p []byte) (int, error) {
	if err := w.r.Event(agent.EventData, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// TarOut streams a directory out as a tar archive in data events (agent.TarOutArgs).
func (h *Handlers) TarOut(ctx context.Context, args json.RawMessage, _ []byte, r *op.Responder) (any, error) {
	var a agent.TarOutArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	if a.Path == "" {
		a.Path = "."
	}
	t, err := h.WS.Open(a.Path, a.Guard, false)
	if err != nil {
		return nil, err
	}
	// Events of 256 KiB, not one per header and per file: a tree of small files would
	// otherwise be thousands of frames of a few hundred bytes.
	bw := bufio.NewWriterSize(eventWriter{r}, 256<<10)
	c := &capture{h: h, ctx: ctx, a: a, base: t, tw: tar.NewWriter(bw), links: map[fileID]string{}, now: time.Now()}
	if a.Exact && (a.Refs || a.Remember) {
		var ok bool
		if c.mapped, ok = writableMappings(); !ok {
			// Some process's mappings are hidden from the agent: any file may change
			// without its times showing it. Everything goes whole, nothing is kept.
			c.a.Refs, c.a.Remember = false, false
		}
	}
	if err := c.walk(t.Real, "."); err != nil {
		return nil, err
	}
	if len(c.res.Skipped) > 0 {
		list, _ := json.Marshal(c.res.Skipped)
		if err := c.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, Format: tar.FormatPAX,
			PAXRecords: map[string]string{agent.TarSkipped: string(list)}}); err != nil {
			return nil, err
		}
	}
	if err := c.tw.Close(); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	return c.res, nil
}

// fileID is an inode: a hard link's identity.
type fileID struct{ dev, ino uint64 }

// capture is one tar.out under way.
type capture struct {
	h       *Handlers
	ctx     context.Context
	a       agent.TarOutArgs
	base    fs.Target
	tw      *tar.Writer
	links   map[fileID]string // exact: the first path of each multiply-linked file
	entries int
	res     agent.TarResult
	now     time.Time       // when it started: files changed since are never sent as references
	mapped  map[uint64]bool // inodes mapped shared and writable: never references
}

// fail is an exact capture's error about one entry: the capture stops, naming it.
func (c *capture) fail(name string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &agent.WireError{Code: agent.CodeInternal, Path: name,
		Message: fmt.Sprintf("can't read %s for the archive: %v (nothing was changed; fix or remove it and try again)", name, err)}
}

func (c *capture) walk(real, name string) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	ents, err := c.h.WS.ReadDir(real)
	if err != nil {
		if !c.a.Exact {
			return err
		}
		return c.fail(name, err)
	}
	for _, e := range ents {
		childReal, childName := path.Join(real, e.Name()), path.Join(name, e.Name())
		if fs.IsStaging(childReal) {
			continue // an upload in progress
		}
		if c.a.Guard != nil && (c.a.Guard.Check(childReal) != nil || c.a.Guard.Check(path.Join(c.base.Rel, childName)) != nil) {
			continue
		}
		if err := c.entry(e, childReal, childName); err != nil {
			return err
		}
	}
	return nil
}

// entry writes one entry (and, for a directory, what it holds).
func (c *capture) entry(e iofs.DirEntry, real, name string) error {
	fi, err := e.Info()
	if err != nil {
		return nil // vanished since it was listed
	}
	if c.a.Exact {
		if c.entries++; c.entries > agent.MaxTarEntries {
			return agent.Errorf(agent.CodeTooLarge, name, "the workspace holds more than %d entries, more than an archive may (agent.MaxTarEntries)", agent.MaxTarEntries)
		}
	}
	link := ""
	switch m := fi.Mode(); {
	case m&iofs.ModeSymlink != 0:
		if link, err = c.h.WS.Root().Readlink(real); err != nil {
			if !c.a.Exact {
				return nil
			}
			return c.fail(name, err)
		}
	case m.IsDir(), m.IsRegular():
	default:
		if c.a.Exact {
			c.res.Skipped = append(c.res.Skipped, agent.TarSkip{Path: name, Why: kindName(m) + ": not kept in an archive"})
		}
		return nil
	}
	// A regular file is opened (without following links) before its header is written,
	// and the header describes what was opened.
	var f *os.File
	if fi.Mode().IsRegular() {
		f, fi, err = c.open(real, name)
		if err != nil || f == nil {
			return err
		}
		defer f.Close()
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return nil // sockets and the like
	}
	hdr.Name, hdr.Uname, hdr.Gname = name, "", ""
	var sparse []segment
	if c.a.Exact {
		hdr.Uid, hdr.Gid, hdr.AccessTime, hdr.ChangeTime, hdr.Format = 0, 0, time.Time{}, time.Time{}, tar.FormatPAX
		hdr.Mode = int64(unixMode(fi))
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() {
			if st.Nlink > 1 {
				id := fileID{uint64(st.Dev), st.Ino}
				if first, ok := c.links[id]; ok {
					hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				} else {
					c.links[id] = name
				}
			}
			if hdr.Typeflag == tar.TypeReg && st.Blocks*512 < st.Size {
				if sparse, err = dataSegments(f, st.Size); err != nil {
					return c.fail(name, err)
				}
				hdr.PAXRecords = map[string]string{agent.TarSparse: formatSparse(sparse, st.Size)}
				hdr.Size = 0
				for _, s := range sparse {
					hdr.Size += s.len
				}
			}
		}
	}
	var stamp sumStamp
	ref := false
	if c.a.Exact && hdr.Typeflag == tar.TypeReg {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			stamp = sumStamp{id: fileID{uint64(st.Dev), st.Ino}, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
			if hdr.PAXRecords != nil {
				stamp.sparse = hdr.PAXRecords[agent.TarSparse] // the data the sum covers
			}
			if c.mapped[st.Ino] {
				c.h.sums.drop(stamp.id)
				stamp = sumStamp{} // its times may not show its writes
			} else if known, ok := c.h.sums.get(stamp); ok && c.a.Refs {
				if ref, err = c.trust(f, hdr.Size, stamp, known); err != nil {
					return c.fail(name, err)
				}
				if ref {
					if hdr.PAXRecords == nil {
						hdr.PAXRecords = map[string]string{}
					}
					hdr.PAXRecords[agent.TarRef], hdr.PAXRecords[agent.TarRefSize] = known.sum, strconv.FormatInt(hdr.Size, 10)
					hdr.Size = 0
				}
			}
		}
	}
	if fi.IsDir() {
		hdr.Name += "/"
	}
	if err := c.tw.WriteHeader(hdr); err != nil {
		return err
	}
	switch {
	case fi.IsDir():
		c.res.Dirs++
		if c.a.Exact {
			restore, err := c.traversable(real, fi)
			if err != nil {
				return c.fail(name, err)
			}
			defer restore()
		}
		return c.walk(real, name)
	case hdr.Typeflag == tar.TypeLink:
		c.res.Files++
	case ref:
		c.res.Files++
		size, _ := strconv.ParseInt(hdr.PAXRecords[agent.TarRefSize], 10, 64)
		c.res.Bytes += size
	case hdr.PAXRecords[agent.TarSparse] != "":
		var sum hash.Hash
		var w io.Writer = c.tw
		if c.a.Remember {
			sum = sha256.New()
			w = io.MultiWriter(c.tw, sum)
		}
		for _, s := range sparse {
			n, err := io.Copy(w, io.NewSectionReader(f, s.off, s.len))
			if err == nil && n < s.len {
				err = fmt.Errorf("it shrank while it was read (%d of %d bytes at %d)", n, s.len, s.off)
			}
			if err != nil {
				return c.fail(name, err)
			}
		}
		c.res.Files++
		c.res.Bytes += hdr.Size
		if sum != nil {
			c.remember(stamp, hex.EncodeToString(sum.Sum(nil)))
		}
	case fi.Mode().IsRegular():
		var sum hash.Hash
		var w io.Writer = c.tw
		if c.a.Exact && c.a.Remember {
			sum = sha256.New()
			w = io.MultiWriter(c.tw, sum)
		}
		n, err := io.Copy(w, io.LimitReader(f, hdr.Size))
		if err == nil && n < hdr.Size {
			err = fmt.Errorf("it shrank from %d to %d bytes while it was read", hdr.Size, n)
		}
		if err != nil {
			if c.a.Exact {
				return c.fail(name, err)
			}
			return err
		}
		c.res.Files++
		c.res.Bytes += n
		if sum != nil {
			c.remember(stamp, hex.EncodeToString(sum.Sum(nil)))
		}
	}
	return nil
}

// remember keeps the SHA-256 of a file just read whole, for the next capture's Refs.
// A file that changed within racyWindow of the capture is kept as racy: a file
// system's timestamps are as coarse as its clock tick, so a write right after the read
// could leave them as they were (git's "racily clean" entries), and the next capture
// reads such a file again to check its sum before it sends a reference (trust).
func (c *capture) remember(st sumStamp, sum string) {
	if st.id == (fileID{}) {
		return
	}
	recent := c.now.Add(-racyWindow).UnixNano()
	c.h.sums.put(sumCached{st: st, sum: sum, racy: st.mtime >= recent || st.ctime >= recent})
}

// trust says whether f (of size bytes, stamped st) may go as a reference to known's
// sum. A racy sum is checked: f is read and hashed here (no bytes leave the agent), and
// rewound for the copy that follows if it differs. A sum that checks is remembered
// again, racy or not as of this capture.
func (c *capture) trust(f *os.File, size int64, st sumStamp, known sumCached) (bool, error) {
	if !known.racy {
		return true, nil
	}
	if st.sparse != "" || f == nil {
		return false, nil
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, size))
	if err == nil && n == size && hex.EncodeToString(h.Sum(nil)) == known.sum {
		c.remember(st, known.sum)
		return true, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return false, err // the copy that follows would start mid-file
	}
	return false, nil
}

// racyWindow is how long before a capture a file must have last changed for its sum to
// be trusted next time without reading the file again (a variable for the tests).
var racyWindow = 2 * time.Second

// sumStamp is what identifies a file's contents without reading them.
type sumStamp struct {
	id           fileID
	size         int64
	mtime, ctime int64
	sparse       string // a sparse file's data map (agent.TarSparse)
}

// sumCache is the SHA-256 of each file an exact capture sent whole, by inode, as long
// as the inode's size and times stay what they were then.
type sumCache struct {
	mu sync.Mutex
	m  map[fileID]sumCached
}

type sumCached struct {
	st   sumStamp
	sum  string
	racy bool // the file changed within racyWindow of the capture that read it
}

// maxSums bounds the cache (a workspace holds at most agent.MaxTarEntries entries).
const maxSums = agent.MaxTarEntries

func (s *sumCache) get(st sumStamp) (sumCached, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[st.id]
	if !ok || c.st != st {
		return sumCached{}, false
	}
	return c, true
}

func (s *sumCache) drop(id fileID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

func (s *sumCache) put(c sumCached) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= maxSums {
		s.m = map[fileID]sumCached{}
	}
	s.m[c.st.id] = c
}

// open opens a regular file for the archive and stats what it opened. A file that
// vanished or turned into something else since it was listed is left out (nil file);
// in an exact capture a file the workspace user can't read is read as its owner, and
// any other failure is the capture's.
func (c *capture) open(real, name string) (*os.File, iofs.FileInfo, error) {
	f, err := c.h.WS.OpenReal(real, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if c.a.Exact && errors.Is(err, unix.EACCES) {
		f, err = c.openAsOwner(real)
	}
	if err == nil && fs.CheckLinks(f, c.a.Guard, name) != nil {
		f.Close()
		return nil, nil, nil // maybe a denied file under another name
	}
	var fi iofs.FileInfo
	if err == nil {
		if fi, err = f.Stat(); err == nil && !fi.Mode().IsRegular() {
			f.Close()
			return nil, nil, nil // swapped for something else since it was listed
		}
	}
	switch {
	case err == nil:
		return f, fi, nil
	case errors.Is(err, iofs.ErrNotExist), errors.Is(err, unix.ELOOP), !c.a.Exact:
		if f != nil {
			f.Close()
		}
		return nil, nil, nil // vanished, or swapped for a link since it was listed
	}
	return nil, nil, c.fail(name, err)
}

// openAsOwner opens a file whose mode keeps its owner (the workspace user, as whom the
// agent opens files) from reading it: read permission is added for the open and the
// mode put back at once.
func (c *capture) openAsOwner(real string) (*os.File, error) {
	p, err := c.h.WS.OpenReal(real, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(p.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, unix.EACCES
	}
	proc := fs.FDPath(p)
	if err := unix.Fchmodat(unix.AT_FDCWD, proc, st.Mode&0o7777|0o400, 0); err != nil {
		return nil, fmt.Errorf("%w (and it can't be made readable: %v)", unix.EACCES, err)
	}
	f, err := os.OpenFile(proc, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if rerr := unix.Fchmodat(unix.AT_FDCWD, proc, st.Mode&0o7777, 0); rerr != nil && err == nil {
		f.Close()
		return nil, fmt.Errorf("put its mode back: %w", rerr)
	}
	return f, err
}

// traversable makes a directory its owner can't list or enter listable for the walk
// beneath it; the returned func puts its mode back. A directory of another owner is
// left as it is (its group or other bits may let the walk in; if not, the walk fails
// naming it).
func (c *capture) traversable(real string, fi iofs.FileInfo) (func(), error) {
	if unixMode(fi)&0o500 == 0o500 {
		return func() {}, nil
	}
	p, err := c.h.WS.OpenReal(real, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(p.Fd()), &st); err != nil {
		p.Close()
		return nil, err
	}
	mode := st.Mode & 0o7777 // as it is now, not as it was listed
	proc := fs.FDPath(p)
	if err := unix.Fchmodat(unix.AT_FDCWD, proc, mode|0o500, 0); err != nil {
		p.Close()
		if errors.Is(err, unix.EPERM) {
			return func() {}, nil // not the workspace user's: its other bits decide
		}
		return nil, fmt.Errorf("the directory is not readable, and can't be made readable: %w", err)
	}
	return func() {
		if err := unix.Fchmodat(unix.AT_FDCWD, proc, mode, 0); err != nil {
			c.h.Log.Warn("tar.out: put a directory's mode back", "dir", real, "err", err)
		}
		p.Close()
	}, nil
}

// unixMode is fi's permission bits with setuid, setgid and sticky, as chmod takes them.
func unixMode(fi iofs.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Mode & 0o7777
	}
	m := uint32(fi.Mode().Perm())
	if fi.Mode()&iofs.ModeSetuid != 0 {
		m |= 0o4000
	}
	if fi.Mode()&iofs.ModeSetgid != 0 {
		m |= 0o2000
	}
	if fi.Mode()&iofs.ModeSticky != 0 {
		m |= 0o1000
	}
	return m
}

// kindName names what a skipped entry is.
func kindName(m iofs.FileMode) string {
	switch {
	case m&iofs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&iofs.ModeSocket != 0:
		return "a socket"
	case m&iofs.ModeDevice != 0:
		return "a device"
	}
	return "an irregular file"
}
