package fs

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"unicode/utf8"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
	"golang.org/x/sys/unix"
)

// BinarySniff is how much of a file decides whether it is binary.
const BinarySniff = 8 << 10

// FileInfo describes the entry at rel.
func FileInfo(rel string, fi fs.FileInfo) agent.FileInfo {
	t := agent.TypeOther
	switch {
	case fi.Mode().IsRegular():
		t = agent.TypeFile
	case fi.IsDir():
		t = agent.TypeDir
	case fi.Mode()&fs.ModeSymlink != 0:
		t = agent.TypeSymlink
	}
	return agent.FileInfo{Name: path.Base(rel), Path: rel, Type: t, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), MTime: fi.ModTime().UTC()}
}

// Stat describes one path (agent.StatArgs).
func (h *Handlers) Stat(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.StatArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	t, f, err := h.WS.OpenChecked(a.Path, a.Guard, false, unix.O_PATH, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return FileInfo(t.Rel, fi), nil
}

// isBinary reports whether a file's first bytes look binary: a NUL byte, or bytes that
// are not UTF-8 (ignoring a rune cut at the end of the sample).
func isBinary(head []byte) bool {
	if bytes.IndexByte(head, 0) >= 0 {
		return true
	}
	for cut := 0; cut < utf8.UTFMax && cut <= len(head); cut++ {
		if utf8.Valid(head[:len(head)-cut]) {
			return false
		}
	}
	return true
}

// Read sends a file's content as data events (agent.ReadArgs).
func (h *Handlers) Read(ctx context.Context, args json.RawMessage, _ []byte, r *op.Responder) (any, error) {
	var a agent.ReadArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	return h.ReadDecoded(ctx, a, r)
}

// Holder takes a read's data (op.Responder's Hold, or a local read's buffer).
type Holder interface {
	Hold(ev string, data []byte) error
}

// ReadDecoded is Read of arguments already decoded (cws's local reads have them as
// they were asked); the data goes to r. Its result is an agent.ReadResult.
func (h *Handlers) ReadDecoded(ctx context.Context, a agent.ReadArgs, r Holder) (any, error) {
	if a.Offset < 0 || a.Length < 0 {
		return nil, agent.Errorf(agent.CodeInvalid, a.Path, "offset and length must not be negative")
	}
	// O_NONBLOCK: a FIFO planted in the workspace must not hang the read.
	t, f, err := h.WS.OpenChecked(a.Path, a.Guard, false, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, agent.Errorf(agent.CodeIsDir, t.Rel, "is a directory")
	}
	if !fi.Mode().IsRegular() {
		return nil, agent.Errorf(agent.CodeInvalid, t.Rel, "not a regular file")
	}
	if a.MaxSize > 0 && fi.Size() > a.MaxSize {
		return nil, agent.Errorf(agent.CodeTooLarge, t.Rel, "file is %d bytes, the limit is %d", fi.Size(), a.MaxSize)
	}
	var src io.Reader = f
	if a.Offset > 0 {
		if _, err := f.Seek(a.Offset, io.SeekStart); err != nil {
			return nil, err
		}
	}
	// The file may grow after the stat above (a process of the workspace writing it):
	// never read past its first MaxSize bytes, whatever the size said (room is what
	// that leaves past the offset).
	var room int64
	capped := false
	if a.MaxSize > 0 {
		room = max(a.MaxSize-a.Offset, 0)
		capped = a.Length <= 0 || a.Length > room
	}
	switch {
	case capped:
		src = io.LimitReader(f, min(room, math.MaxInt64-1)+1) // one byte over tells it grew
	case a.Length > 0:
		src = io.LimitReader(f, a.Length)
	}
	res := agent.ReadResult{Info: FileInfo(t.Rel, fi)}
	sum := sha256.New()
	buf := make([]byte, min(agent.ChunkSize, max(fi.Size()+1, 512)))
	var head []byte
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n, rerr := io.ReadFull(src, buf)
		if capped && res.N+int64(n) > room {
			return nil, agent.Errorf(agent.CodeTooLarge, t.Rel, "file grew past the limit of %d bytes while it was read", a.MaxSize)
		}
		if n > 0 {
			chunk := buf[:n]
			if len(head) < BinarySniff {
				head = append(head, chunk[:min(n, BinarySniff-len(head))]...)
			}
			if a.Hash {
				sum.Write(chunk)
			}
			if err := r.Hold(agent.EventData, chunk); err != nil {
				return nil, err
			}
			res.N += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return nil, rerr
		}
	}
	res.IsBinary = isBinary(head)
	if a.Hash {
		res.SHA256 = hex.EncodeToString(sum.Sum(nil))
	}
	return res, nil
}

// Write writes the body to a file (agent.WriteArgs).
func (h *Handlers) Write(ctx context.Context, args json.RawMessage, body []byte, _ *op.Responder) (any, error) {
	var a agent.WriteArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	if a.MaxSize > 0 && int64(len(body)) > a.MaxSize {
		return nil, agent.Errorf(agent.CodeTooLarge, a.Path, "content is %d bytes, the limit is %d", len(body), a.MaxSize)
	}
	mode := uint32(0o644)
	if a.Mode != 0 {
		mode = uint32(fs.FileMode(a.Mode).Perm())
	}
	for try := 0; ; try++ {
		fi, err := h.writeOnce(&a, body, mode)
		if swapped(err) && try < swapRetries {
			continue // a directory or the file became a symlink after the check
		}
		if swapped(err) {
			return nil, agent.Errorf(agent.CodeDenied, a.Path, "the path keeps changing while it is written (a symlink was swapped in)")
		}
		if info, ok := fi.(agent.FileInfo); ok && err == nil {
			h.wrote(info.Path, a.Guard, false)
		}
		return fi, h.noSpace(err, a.Path, len(body)) // diskfull.go
	}
}

// writeOnce resolves and checks the path, then writes through file descriptors opened
// without following links: the parent directory for an atomic write (a temp file, then
// renameat within that directory), the file itself otherwise (truncated only after its
// link count was checked, so a hard link to a denied file is never changed).
func (h *Handlers) writeOnce(a *agent.WriteArgs, body []byte, mode uint32) (any, error) {
	t, err := h.WS.Open(a.Path, a.Guard, true)
	if err != nil {
		return nil, err
	}
	if t.Real == "." {
		return nil, agent.Errorf(agent.CodeIsDir, t.Rel, "is a directory")
	}
	dir, base, err := h.WS.OpenParent(t, a.Mkdirs)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	dfd := int(dir.Fd())
	var st unix.Stat_t
	switch err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return nil, agent.Errorf(agent.CodeIsDir, t.Rel, "is a directory")
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return nil, &fs.PathError{Op: "write", Path: t.Real, Err: unix.ELOOP} // swapped in after resolve
	case err == nil:
		mode = st.Mode & 0o777
	case err != unix.ENOENT:
		return nil, &fs.PathError{Op: "stat", Path: t.Real, Err: err}
	case !a.Create:
		return nil, agent.Errorf(agent.CodeNotFound, t.Rel, "file does not exist")
	}
	var f *os.File
	if a.Atomic {
		f, err = writeAtomicAt(dfd, base, body, mode)
	} else {
		f, err = writeInPlaceAt(dfd, base, body, mode, a.Guard, t.Rel)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return FileInfo(t.Rel, fi), nil
}

// writeAtomicAt writes a temp file in the directory dfd and renames it over base, so a
// reader sees the old content or the new, never a mix. Renaming replaces the name only:
// a hard link's other names keep the old content. It returns the new file, open.
func writeAtomicAt(dfd int, base string, body []byte, mode uint32) (*os.File, error) {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := "." + base + ".cws-" + hex.EncodeToString(rnd[:]) + ".tmp"
	if len(tmp) > 255 {
		tmp = ".cws-" + hex.EncodeToString(rnd[:]) + ".tmp"
	}
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return nil, &fs.PathError{Op: "create", Path: base, Err: err}
	}
	f := os.NewFile(uintptr(fd), base)
	_, err = f.Write(body)
	if err == nil {
		err = unix.Fchmod(fd, mode) // the umask narrowed the create
	}
	if err == nil {
		if rerr := unix.Renameat(dfd, tmp, dfd, base); rerr != nil {
			err = &fs.PathError{Op: "rename", Path: base, Err: rerr}
		}
	}
	if err != nil {
		f.Close()
		_ = unix.Unlinkat(dfd, tmp, 0)
		return nil, err
	}
	return f, nil
}

// writeInPlaceAt opens base in dfd without following a link, checks its link count, and
// only then truncates and writes it.
func writeInPlaceAt(dfd int, base string, body []byte, mode uint32, g *guard.Guard, rel string) (*os.File, error) {
	fd, err := unix.Openat(dfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, mode)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: base, Err: err}
	}
	f := os.NewFile(uintptr(fd), base)
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	if err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		err = agent.Errorf(agent.CodeInvalid, rel, "not a regular file")
	}
	if err == nil && Denies(g) {
		err = linkRule(&st, rel)
	}
	if err == nil {
		err = f.Truncate(0)
	}
	if err == nil {
		_, err = f.Write(body)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Remove removes a file or directory (agent.RemoveArgs).
func (h *Handlers) Remove(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.RemoveArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	t, err := h.WS.Entry(a.Path, a.Guard)
	if err != nil {
		return nil, err
	}
	dir, base, err := h.WS.OpenParent(t, false)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, &fs.PathError{Op: "remove", Path: t.Rel, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, unlinkAt(dir, base, 0, t.Rel)
	}
	if a.Recursive {
		// The directory, as a root of its own: RemoveAll never follows a link out of it.
		sub, err := os.OpenRoot(FDPath(dir))
		if err != nil {
			return nil, err
		}
		defer sub.Close()
		return nil, sub.RemoveAll(base)
	}
	return nil, unlinkAt(dir, base, unix.AT_REMOVEDIR, t.Rel)
}

func unlinkAt(dir *os.File, base string, flags int, rel string) error {
	if err := unix.Unlinkat(int(dir.Fd()), base, flags); err != nil {
		return &fs.PathError{Op: "remove", Path: rel, Err: err}
	}
	return nil
}

// FDPath names an open directory through /proc, so a path-based API starts exactly there.
func FDPath(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }

// Rename moves a file or directory (agent.RenameArgs).
func (h *Handlers) Rename(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.RenameArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	from, err := h.WS.Entry(a.From, a.Guard)
	if err != nil {
		return nil, err
	}
	to, err := h.WS.Entry(a.To, a.Guard)
	if err != nil {
		return nil, err
	}
	fd, fbase, err := h.WS.OpenParent(from, false)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	var st unix.Stat_t
	if err := unix.Fstatat(int(fd.Fd()), fbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, &fs.PathError{Op: "rename", Path: from.Rel, Err: err}
	}
	td, tbase, err := h.WS.OpenParent(to, a.Mkdirs)
	if err != nil {
		return nil, err
	}
	defer td.Close()
	flags := uint(unix.RENAME_NOREPLACE)
	if a.Overwrite {
		flags = 0
	}
	if err := unix.Renameat2(int(fd.Fd()), fbase, int(td.Fd()), tbase, flags); err != nil {
		if err == unix.EEXIST {
			return nil, agent.Errorf(agent.CodeExists, to.Rel, "destination exists")
		}
		return nil, &fs.PathError{Op: "rename", Path: to.Rel, Err: err}
	}
	fi, err := os.Lstat(FDPath(td) + "/" + tbase)
	if err != nil {
		return nil, err
	}
	return FileInfo(to.Rel, fi), nil
}

// Mkdir creates a directory and its parents (agent.MkdirArgs).
func (h *Handlers) Mkdir(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.MkdirArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	t, err := h.WS.Open(a.Path, a.Guard, true)
	if err != nil {
		return nil, err
	}
	if err := h.WS.MkdirAll(t.Real); err != nil {
		return nil, err
	}
	f, err := h.WS.OpenReal(t.Real, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return FileInfo(t.Rel, fi), nil
}
