package archive

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	iofs "io/fs"
	"path"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/cpulimit"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
	"golang.org/x/sys/unix"
)

// The staging of an exact archive (a restore), as fast as the disk allows. The reader
// of the archive stays sequential: it checks every entry as before, creates the
// directories and symlinks itself, and reads each small regular file whole and hands
// it to a pool of workers that write files in parallel, whichever directories they are
// in (the snapshot store reads files back grouped by the pack that holds them, not by
// path). A large file is written by the reader as it streams. Hard links are made once
// every file is written.
//
// Every entry is created relative to its staged directory, held open (O_PATH, opened
// O_NOFOLLOW when it was made, so a symlink swapped in later is never followed), by its
// last name alone: no path is resolved again from the root per entry. A file costs
// openat, its writes, fchmod, utimensat and close; nothing is fsynced (the archive is
// in the store; a restore cut short is done again).

// restoreWorkers is how many files of an exact archive are written at once, where the
// agent has more than one CPU (see workers).
var restoreWorkers = 4

// workers is how many workers a restore starts: one under a one-CPU limit, where four
// cost more in handing files between threads that the quota throttles than they win.
// In a one-CPU workspace container (BenchmarkTarInContainer, 20 restores of 2,000
// files per figure, two rounds) the container's CPU for a restore against `tar -x`'s
// was 1.30× and 1.14× with one worker, 2.37× and 1.34× with four, 1.73× and 1.57×
// with the reader writing every file itself. The limit is read from the cgroup at
// each restore: a pooled container takes its tenant's limit at hand-out, moments
// before a wake restores into it, and GOMAXPROCS follows only within 10 s.
func workers() int {
	if n := cpulimit.CPUs(); n == 1 || (n == 0 && runtime.GOMAXPROCS(0) <= 1) {
		return 1
	}
	return restoreWorkers
}

const (
	// bufferedMax is the largest file the reader hands to a worker whole; with the
	// queue it bounds the memory a restore holds to about (2*restoreWorkers+1)*bufferedMax.
	bufferedMax = 1 << 20
	// maxHeldDirs bounds the staged directories held open; past it half are closed
	// (and opened again by name from their parent when an entry needs them).
	maxHeldDirs = 4096
)

// heldDir is a staged directory held open, shared by the files queued into it.
type heldDir struct {
	fd   int
	refs atomic.Int32 // the cache's own, and one per queued file
}

func (d *heldDir) acquire() *heldDir { d.refs.Add(1); return d }

func (d *heldDir) release() {
	if d.refs.Add(-1) == 0 {
		unix.Close(d.fd)
	}
}

// stager creates the entries of one exact archive in its staging directory.
type stager struct {
	root  *heldDir
	held  map[string]*heldDir // archive path → its staged directory (the reader's only)
	made  map[string]bool     // directories created
	jobs  chan fileJob
	wg    sync.WaitGroup
	links []hardLink

	mu     sync.Mutex
	err    error // the first worker's failure
	failed atomic.Bool
	done   bool
}

// fileJob is one regular file for a worker.
type fileJob struct {
	dir    *heldDir
	name   string // in dir
	entry  string // the archive's name, for errors
	data   []byte // whole, or the sparse segments' data in order
	segs   []segment
	sparse bool
	size   int64 // apparent size (sparse)
	mode   uint32
	mtime  time.Time
}

type hardLink struct{ entry, name, target string }

// newStager opens the staging directory stage (workspace-relative) and starts the
// workers.
func newStager(ws *fs.Workspace, stage string) (*stager, error) {
	f, err := ws.OpenReal(stage, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		return nil, err
	}
	s := &stager{root: &heldDir{fd: fd}, held: map[string]*heldDir{}, made: map[string]bool{},
		jobs: make(chan fileJob, 2*restoreWorkers)}
	s.root.refs.Store(1)
	for range workers() {
		s.wg.Go(s.work)
	}
	return s, nil
}

func (s *stager) work() {
	for j := range s.jobs {
		if !s.failed.Load() {
			if err := s.write(&j, nil); err != nil {
				s.fail(err)
			}
		}
		j.dir.release()
	}
}

func (s *stager) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.failed.Store(true)
}

// failure is a worker's failure so far, if any.
func (s *stager) failure() error {
	if !s.failed.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// dir returns the staged directory of archive path name, creating it (and its
// parents) if need be. The reader's only.
func (s *stager) dir(name string) (*heldDir, error) {
	if name == "." {
		return s.root, nil
	}
	if d, ok := s.held[name]; ok {
		return d, nil
	}
	parent, err := s.dir(path.Dir(name))
	if err != nil {
		return nil, err
	}
	base := path.Base(name)
	if !s.made[name] {
		if err := unix.Mkdirat(parent.fd, base, 0o755); err != nil && err != unix.EEXIST {
			return nil, &iofs.PathError{Op: "mkdir", Path: name, Err: err}
		}
		s.made[name] = true
	}
	fd, err := unix.Openat(parent.fd, base, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &iofs.PathError{Op: "open", Path: name, Err: err}
	}
	if len(s.held) >= maxHeldDirs {
		n := 0
		for k, d := range s.held { // map order: a random half
			delete(s.held, k)
			d.release()
			if n++; n >= maxHeldDirs/2 {
				break
			}
		}
	}
	d := &heldDir{fd: fd}
	d.refs.Store(1)
	s.held[name] = d
	return d, nil
}

// mkdirExact stages a directory of the archive.
func (x *extraction) mkdirExact(entry, name string) error {
	if _, err := x.st.dir(name); err != nil {
		return x.stageErr(entry, err)
	}
	return nil
}

// fileExact stages a regular file of an exact archive: read whole and queued for a
// worker, or, past bufferedMax, written here as it streams.
func (x *extraction) fileExact(hdr *tar.Header, name string, tr io.Reader) error {
	if err := x.st.failure(); err != nil {
		return err
	}
	j := fileJob{name: path.Base(name), entry: hdr.Name, size: hdr.Size, mode: uint32(hdr.Mode) & 0o7777, mtime: hdr.ModTime}
	if raw, ok := hdr.PAXRecords[agent.TarSparse]; ok {
		var err error
		if j.segs, j.size, err = parseSparse(raw, hdr.Size); err != nil {
			return agent.Errorf(agent.CodeInvalid, hdr.Name, "%v", err)
		}
		j.sparse = true
	}
	d, err := x.st.dir(path.Dir(name))
	if err != nil {
		return x.stageErr(hdr.Name, err)
	}
	j.dir = d
	if hdr.Size > bufferedMax {
		return x.st.write(&j, tr)
	}
	j.data = make([]byte, hdr.Size)
	if _, err := io.ReadFull(tr, j.data); err != nil {
		return readErr(hdr.Name, err)
	}
	d.acquire()
	x.st.jobs <- j
	return nil
}

// symlinkExact stages a symlink with its own mtime.
func (x *extraction) symlinkExact(hdr *tar.Header, name string) error {
	d, err := x.st.dir(path.Dir(name))
	if err != nil {
		return x.stageErr(hdr.Name, err)
	}
	base := path.Base(name)
	if err := unix.Symlinkat(hdr.Linkname, d.fd, base); err != nil {
		return x.stageErr(hdr.Name, &iofs.PathError{Op: "symlink", Path: name, Err: err})
	}
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	if err := unix.UtimesNanoAt(d.fd, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return x.stageErr(hdr.Name, &iofs.PathError{Op: "utimes", Path: name, Err: err})
	}
	return nil
}

// linkExact notes a hard link, made once every file is written.
func (x *extraction) linkExact(entry, name, target string) {
	x.st.links = append(x.st.links, hardLink{entry, name, target})
}

// finishExact waits for the workers, then makes the hard links.
func (x *extraction) finishExact() error {
	if err := x.st.wait(); err != nil {
		return err
	}
	for _, l := range x.st.links {
		td, err := x.st.dir(path.Dir(l.target))
		if err != nil {
			return x.stageErr(l.entry, err)
		}
		tfd := td.acquire() // the link's directory may push it out of the cache
		ld, err := x.st.dir(path.Dir(l.name))
		if err == nil {
			err = unix.Linkat(tfd.fd, path.Base(l.target), ld.fd, path.Base(l.name), 0)
			if err != nil {
				err = &iofs.PathError{Op: "link", Path: l.name, Err: err}
			}
		}
		tfd.release()
		if err != nil {
			return x.stageErr(l.entry, err)
		}
	}
	return nil
}

// wait stops the workers once they have written everything queued, and returns the
// first failure.
func (s *stager) wait() error {
	if !s.done {
		s.done = true
		close(s.jobs)
		s.wg.Wait()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// close stops the workers (what is queued is dropped after a failure) and closes the
// directories held.
func (s *stager) close() {
	s.failed.Store(true) // the queued files are not written
	_ = s.wait()
	for k, d := range s.held {
		delete(s.held, k)
		d.release()
	}
	s.root.release()
}

// write creates one regular file in its directory: its data (from j.data, or streamed
// from src), its mode and its mtime.
func (s *stager) write(j *fileJob, src io.Reader) error {
	fd, err := unix.Openat(j.dir.fd, j.name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	for err == unix.EINTR {
		fd, err = unix.Openat(j.dir.fd, j.name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	}
	if err != nil {
		return writeErr(j.entry, "open", err)
	}
	err = j.fill(fd, src)
	if err == nil {
		if err = unix.Fchmod(fd, j.mode); err != nil {
			err = writeErr(j.entry, "chmod", err)
		}
	}
	if err == nil {
		if err = futimens(fd, j.mtime); err != nil {
			err = writeErr(j.entry, "utimes", err)
		}
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = writeErr(j.entry, "close", cerr)
	}
	return err
}

// fill writes the file's data at its offsets: a dense file from 0, a sparse file's
// segments where they were, then its apparent size.
func (j *fileJob) fill(fd int, src io.Reader) error {
	segs := j.segs
	if !j.sparse {
		segs = []segment{{0, j.size}}
	}
	var buf []byte
	if src != nil {
		buf = make([]byte, min(bufferedMax, j.size))
	}
	data := j.data
	for _, sg := range segs {
		if src == nil {
			if err := pwriteAll(fd, data[:sg.len], sg.off); err != nil {
				return writeErr(j.entry, "write", err)
			}
			data = data[sg.len:]
			continue
		}
		for off, end := sg.off, sg.off+sg.len; off < end; {
			n, err := io.ReadFull(src, buf[:min(int64(len(buf)), end-off)])
			if err != nil {
				return readErr(j.entry, err)
			}
			if err := pwriteAll(fd, buf[:n], off); err != nil {
				return writeErr(j.entry, "write", err)
			}
			off += int64(n)
		}
	}
	if j.sparse {
		if err := unix.Ftruncate(fd, j.size); err != nil {
			return writeErr(j.entry, "truncate", err)
		}
	}
	return nil
}

func pwriteAll(fd int, p []byte, off int64) error {
	for len(p) > 0 {
		n, err := unix.Pwrite(fd, p, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// futimens sets an open file's mtime (utimensat on the descriptor, path NULL), leaving
// its atime.
func futimens(fd int, mtime time.Time) error {
	ts := [2]unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(mtime.UnixNano())}
	_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// writeErr is a failure of the staging side, as an error naming the entry: a full
// disk is too_large.
func writeErr(entry, op string, err error) error {
	return stageErr(entry, &iofs.PathError{Op: op, Path: entry, Err: err})
}

// readErr is a failure reading an entry's contents from the archive: the archive is
// bad (cut short), unless the restore was canceled.
func readErr(entry string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return agent.Errorf(agent.CodeInvalid, entry, "bad tar archive: %v", err)
}
