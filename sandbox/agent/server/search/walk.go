package search

import (
	"context"
	"io"
	"os"
	"path"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
	"golang.org/x/sys/unix"
)

func (h *Handler) loadIgnore(rules ignoreRules, realDir string) ignoreRules {
	data, err := h.WS.Root().ReadFile(path.Join(realDir, ".gitignore"))
	if err != nil {
		return rules
	}
	return addIgnore(rules, realDir, data)
}

// dirJob is one directory to search. dir is its descriptor, already open (openat from
// its parent, not following symlinks); the job's worker closes it.
type dirJob struct {
	real, rel string
	rules     ignoreRules
	dir       int
}

// loadIgnoreAt adds the .gitignore in the open directory dirfd to rules.
func loadIgnoreAt(rules ignoreRules, dirfd int, realDir string) ignoreRules {
	fd, err := unix.Openat(dirfd, ".gitignore", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return rules
	}
	f := os.NewFile(uintptr(fd), ".gitignore")
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	f.Close()
	if err != nil {
		return rules
	}
	return addIgnore(rules, realDir, data)
}

// dirQueue is an unbounded work queue that knows when all work is done.
type dirQueue struct {
	mu      sync.Mutex
	cond    *sync.Cond
	items   []dirJob
	pending int // queued or being processed
}

func (q *dirQueue) push(j dirJob) {
	q.mu.Lock()
	q.items = append(q.items, j)
	q.pending++
	q.mu.Unlock()
	q.cond.Signal()
}

// pop waits for a job; ok is false once every job is done.
func (q *dirQueue) pop() (dirJob, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && q.pending > 0 {
		q.cond.Wait()
	}
	if len(q.items) == 0 {
		return dirJob{}, false
	}
	j := q.items[len(q.items)-1]
	q.items = q.items[:len(q.items)-1]
	return j, true
}

func (q *dirQueue) done() {
	q.mu.Lock()
	q.pending--
	last := q.pending == 0
	q.mu.Unlock()
	if last {
		q.cond.Broadcast()
	}
}

// walkSearch calls visit for every regular file beneath t that a search should read:
// never .git, symlinks are not followed, .gitignore'd and guard-denied paths are
// skipped, dot-files only with a.Hidden, only files matching a.Globs when set, binaries
// (a NUL byte in the first 8 KiB) and files over a.MaxFileSize skipped, and where the
// guard denies anything, files with more than one link (see fs.CheckLinks). Workers run
// on every core, one directory at a time. It returns how many files were searched.
func (h *Handler) walkSearch(ctx context.Context, t fs.Target, a *agent.SearchArgs, visit func(w *searchWorker, rel string, buf []byte)) (int, error) {
	// Opened without following links: what is searched is the path that was checked.
	top, err := h.WS.OpenReal(t.Real, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0, err
	}
	fi, err := top.Stat()
	if err != nil {
		top.Close()
		return 0, err
	}
	if !fi.IsDir() {
		defer top.Close()
		if !fi.Mode().IsRegular() {
			return 0, nil
		}
		if err := fs.CheckLinks(top, a.Guard, t.Rel); err != nil {
			return 0, err
		}
		w := getWorker()
		defer putWorker(w)
		if buf, ok := w.readFd(int(top.Fd()), a.MaxFileSize, false); ok {
			visit(w, t.Rel, buf)
			return 1, nil
		}
		return 0, nil
	}
	topfd, err := unix.Dup(int(top.Fd()))
	top.Close()
	if err != nil {
		return 0, err
	}
	var rules ignoreRules
	if !a.NoIgnore && t.Real != "." {
		// .gitignore files above the start directory count too.
		var chain []string
		for dir := t.Real; dir != "."; {
			dir = path.Dir(dir)
			chain = append([]string{dir}, chain...)
		}
		for _, d := range chain {
			rules = h.loadIgnore(rules, d)
		}
	}
	q := &dirQueue{}
	q.cond = sync.NewCond(&q.mu)
	q.push(dirJob{real: t.Real, rel: t.Rel, rules: rules, dir: topfd})
	var scanned atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := getWorker()
			defer putWorker(w)
			for {
				j, ok := q.pop()
				if !ok {
					return
				}
				if ctx.Err() == nil {
					n, err := h.searchDir(ctx, j, a, q, w, visit)
					scanned.Add(int64(n))
					if err != nil {
						errOnce.Do(func() { firstErr = err })
					}
				}
				unix.Close(j.dir)
				q.done()
			}
		}()
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return int(scanned.Load()), firstErr
}

// joinRel is path.Join for a clean directory and one entry name, without the Clean.
func joinRel(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// searchDir reads one directory, queues its subdirectories and searches its files.
func (h *Handler) searchDir(ctx context.Context, j dirJob, a *agent.SearchArgs, q *dirQueue, w *searchWorker, visit func(*searchWorker, string, []byte)) (int, error) {
	if err := w.readDirents(j.dir); err != nil {
		return 0, nil // unreadable directories are skipped, as grep -r does
	}
	if !a.NoIgnore {
		for _, e := range w.ents {
			if e.name == ".gitignore" && e.typ == unix.DT_REG {
				j.rules = loadIgnoreAt(j.rules, j.dir, j.real)
				break
			}
		}
	}
	noLinks := fs.Denies(a.Guard)
	n := 0
	for _, e := range w.ents {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		name := e.name
		if name == ".git" || (!a.Hidden && strings.HasPrefix(name, ".")) {
			continue
		}
		isDir := e.typ == unix.DT_DIR
		if !isDir && e.typ != unix.DT_REG { // symlinks, devices, sockets
			continue
		}
		childRel := joinRel(j.rel, name)
		childReal := childRel
		if j.real != j.rel {
			childReal = joinRel(j.real, name)
		}
		if fs.IsStaging(childReal) {
			continue // an upload in progress
		}
		if len(j.rules) > 0 && j.rules.ignored(childReal, isDir) {
			continue
		}
		if a.Guard != nil && (a.Guard.Check(childRel) != nil || (childReal != childRel && a.Guard.Check(childReal) != nil)) {
			continue
		}
		if isDir {
			fd, err := unix.Openat(j.dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err == nil {
				q.push(dirJob{real: childReal, rel: childRel, rules: j.rules, dir: fd})
			}
			continue
		}
		if !matchAnySearch(a.Globs, childRel) {
			continue
		}
		// One path component, relative to a directory opened through the root, without
		// following a symlink: nothing can lead outside the workspace. A file with more
		// than one link may be a denied file under another name (see fs.CheckLinks).
		buf, ok := w.readFileAt(j.dir, name, a.MaxFileSize, noLinks)
		if !ok {
			continue
		}
		n++
		visit(w, childRel, buf)
	}
	return n, nil
}

// matchAnySearch matches search globs against the path and, for bare patterns like
// "*.go", against the file name, as rg -g does.
func matchAnySearch(globs []string, rel string) bool {
	if len(globs) == 0 {
		return true
	}
	base := path.Base(rel)
	for _, g := range globs {
		if ok, _ := doublestar.Match(g, rel); ok {
			return true
		}
		if !strings.Contains(g, "/") {
			if ok, _ := doublestar.Match(g, base); ok {
				return true
			}
		}
	}
	return false
}
