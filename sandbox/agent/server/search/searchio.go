package search

import (
	"bytes"
	"encoding/binary"
	"sync"

	"github.com/cwsdev/cws/sandbox/agent/server/fs"
	"golang.org/x/sys/unix"
)

// Search spends most of its time in system calls, so it makes as few as it can: a
// directory is read with getdents into a reused buffer, and a file costs four calls
// (openat, fstat, one read, close) on a raw descriptor. An *os.File would add an fcntl
// and an epoll registration per file, and a read until EOF one more read.

// searchWorker holds one worker's reusable buffers.
type searchWorker struct {
	buf, low []byte   // the file being searched, and its lowered copy
	dents    []byte   // getdents output
	ents     []dirent // the directory being read
}

// keepBuffer is the largest file buffer a worker keeps between searches, so that a
// search of a tree with a few big files does not allocate (and zero) them again; a
// bigger one is dropped. An idle agent gives the pool back (server/idle.go).
const keepBuffer = 8 << 20

// workers keeps searchWorkers between searches. The runtime empties a sync.Pool over two
// garbage collections, so an idle agent gives the buffers back.
var workers = sync.Pool{New: func() any { return &searchWorker{} }}

func getWorker() *searchWorker { return workers.Get().(*searchWorker) }

func putWorker(w *searchWorker) {
	if cap(w.buf) > keepBuffer {
		w.buf = nil
	}
	if cap(w.low) > keepBuffer {
		w.low = nil
	}
	clear(w.ents[:cap(w.ents)]) // drop the names
	w.ents = w.ents[:0]
	workers.Put(w)
}

// dirent is one directory entry: its name and its type (unix.DT_*).
type dirent struct {
	name string
	typ  uint8
}

// readDirents reads the entries of the open directory fd, except "." and "..", into
// w.ents. An entry of unknown type (some file systems) is typed with fstatat, without
// following a symlink.
func (w *searchWorker) readDirents(fd int) error {
	if w.dents == nil {
		w.dents = make([]byte, 32<<10)
	}
	w.ents = w.ents[:0]
	for {
		n, err := unix.Getdents(fd, w.dents)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name (NUL-ended).
		for off := 0; off+19 <= n; {
			reclen := int(binary.NativeEndian.Uint16(w.dents[off+16:]))
			if reclen == 0 || off+reclen > n {
				break
			}
			typ := w.dents[off+18]
			name := w.dents[off+19 : off+reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			off += reclen
			if string(name) == "." || string(name) == ".." {
				continue
			}
			e := dirent{name: string(name), typ: typ}
			if typ == unix.DT_UNKNOWN {
				e.typ = statType(fd, e.name)
			}
			w.ents = append(w.ents, e)
		}
	}
}

// statType returns the DT_* type of name in the directory fd, not following a symlink.
func statType(fd int, name string) uint8 {
	var st unix.Stat_t
	if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return unix.DT_UNKNOWN
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return unix.DT_DIR
	case unix.S_IFREG:
		return unix.DT_REG
	case unix.S_IFLNK:
		return unix.DT_LNK
	}
	return unix.DT_UNKNOWN
}

// firstRead is how much of a big file is read before the binary check, so that a big
// binary costs one small read.
const firstRead = 64 << 10

// readFileAt opens name in the directory dirfd, without following a symlink, and reads
// it into w.buf. ok is false for what a search skips: an entry that is not (or is no
// longer) a regular file, a file over maxSize (0: no limit), a file with more than one
// link when noLinks is set (see fs.CheckLinks), an unreadable file, and a binary (a NUL
// byte in its first 8 KiB).
func (w *searchWorker) readFileAt(dirfd int, name string, maxSize int64, noLinks bool) ([]byte, bool) {
	// O_NONBLOCK: a FIFO swapped in after the directory was read must not block the open.
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(fd)
	return w.readFd(fd, maxSize, noLinks)
}

// readFd is readFileAt on an open descriptor.
func (w *searchWorker) readFd(fd int, maxSize int64, noLinks bool) ([]byte, bool) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, false
	}
	if noLinks && st.Nlink > 1 {
		return nil, false
	}
	if maxSize > 0 && st.Size > maxSize {
		return nil, false
	}
	size := int(st.Size)
	if cap(w.buf) < size {
		// Doubling: a walk meets bigger and bigger files, and each new buffer is zeroed.
		w.buf = make([]byte, max(size, 2*cap(w.buf), 64<<10))
	}
	buf := w.buf[:size]
	// Read what fstat announced; a file that grows meanwhile is searched as it was.
	got, sniffed := 0, false
	for got < size {
		end := size
		if got == 0 && size > firstRead {
			end = firstRead
		}
		n, err := unix.Read(fd, buf[got:end])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, false
		}
		if n == 0 {
			break // it shrank
		}
		got += n
		if !sniffed && got >= min(size, fs.BinarySniff) {
			if bytes.IndexByte(buf[:min(got, fs.BinarySniff)], 0) >= 0 {
				return nil, false
			}
			sniffed = true
		}
	}
	buf = buf[:got]
	if !sniffed && bytes.IndexByte(buf[:min(got, fs.BinarySniff)], 0) >= 0 {
		return nil, false
	}
	return buf, true
}
