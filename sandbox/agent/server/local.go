package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/cwsdev/cws/sandbox/agent"
)

// OpenLocal serves reads and stats in the host's own process (see agent.Local) with
// the agent's own handlers, on root: the workspace directory the agent sent, checked
// against t (agent.CheckRoot). Every open runs on a thread that has taken t's uid and
// gid as its file-system identity (fsuid, fsgid, no supplementary groups), so the host
// reads nothing the workspace's tools could not. A host that cannot take that identity
// (it is not root) gets an error, and its reads go to the agent.
func OpenLocal(root *os.File, t agent.LocalTarget) (agent.Local, error) {
	fail := func(err error) (agent.Local, error) {
		root.Close()
		return nil, err
	}
	if !path.IsAbs(t.Dir) || t.UID < 0 || t.GID < 0 {
		return fail(fmt.Errorf("no usable workspace directory and identity (%q, %d:%d)", t.Dir, t.UID, t.GID))
	}
	if err := identityCheck(); err != nil {
		return fail(err)
	}
	fd := int(root.Fd())
	r, err := os.OpenRoot("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return fail(err)
	}
	ws := &workspace{dir: path.Clean(t.Dir), root: r, fd: fd}
	s := &Server{log: slog.New(slog.DiscardHandler), ws: ws, idle: newIdleRelease(0)}
	s.ops = map[string]handler{agent.OpRead: s.read, agent.OpStat: s.stat}
	return &local{s: s, file: root, uid: t.UID, gid: t.GID}, nil
}

type local struct {
	s        *Server
	file     *os.File // the descriptor ws.fd is; kept so that it stays open
	uid, gid int

	// Close may come while calls run (the client drops a broken session): the root is
	// closed when the last of them ends, and calls that come after Close go to the agent.
	mu      sync.Mutex
	running int
	closing bool
}

func (l *local) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closing {
		l.closing = true
		l.closeIfIdle()
	}
	return nil
}

// closeIfIdle closes the root once closing and no call runs. Called with mu.
func (l *local) closeIfIdle() {
	if l.closing && l.running == 0 && l.file != nil {
		l.s.ws.root.Close()
		l.file.Close()
		l.file = nil
	}
}

// enter counts a call in, or says that the root is closing.
func (l *local) enter() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return false
	}
	l.running++
	return true
}

func (l *local) leave() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running--
	l.closeIfIdle()
}

// writeCounter remembers whether anything was written.
type writeCounter struct {
	w       io.Writer
	written bool
}

func (c *writeCounter) Write(p []byte) (int, error) {
	c.written = true
	return c.w.Write(p)
}

func (l *local) Answer(ctx context.Context, h *agent.Header, body []byte, w io.Writer) bool {
	op, ok := l.s.ops[h.Op]
	if !ok || h.Stream || h.ID != "" || !l.enter() {
		return false
	}
	defer l.leave()
	wc := &writeCounter{w: w}
	r := &responder{w: wc}
	var res any
	var err error
	if !asIdentity(ctx, l.uid, l.gid, func() { res, err = op(ctx, h.Args, body, r) }) {
		return false
	}
	if errors.Is(err, fs.ErrPermission) && !wc.written && len(r.held) == 0 {
		return false // refused to the host: the agent is the judge
	}
	done, out := doneFrame(res, err)
	_ = r.send(done, out)
	return true
}

// The identity switch. A thread's credentials are its own under Linux (the raw
// syscalls change only the calling thread), so a call locks its goroutine to its
// thread, takes the workspace's fsuid and fsgid with no supplementary groups, runs, and
// puts the process's own back before the thread serves anyone else. Were that ever to
// fail, the thread stays locked to the goroutine and ends with it.

var identity struct {
	once   sync.Once
	err    error
	groups []int // the process's supplementary groups, put back after each call
}

// identityCheck says, once, whether this process can take another identity at all.
func identityCheck() error {
	identity.once.Do(func() {
		groups, err := unix.Getgroups()
		if err != nil {
			identity.err = err
			return
		}
		identity.groups = groups
		runtime.LockOSThread()
		ok := takeIdentity(65534, 65534)
		if !restoreIdentity() {
			return // the thread stays locked: this goroutine ends soon
		}
		runtime.UnlockOSThread()
		if !ok {
			identity.err = errors.New("local reads need CAP_SETUID and CAP_SETGID (root) to read as the workspace's user")
		}
	})
	return identity.err
}

// takeIdentity drops this thread's supplementary groups and sets its fsgid and fsuid,
// and reports whether all took (setfs*id return the previous value; asking again
// returns the current one).
func takeIdentity(uid, gid int) bool {
	if unix.Setgroups(nil) != nil {
		return false
	}
	_, _ = unix.SetfsgidRetGid(gid)
	if cur, _ := unix.SetfsgidRetGid(gid); cur != gid {
		return false
	}
	_, _ = unix.SetfsuidRetUid(uid)
	cur, _ := unix.SetfsuidRetUid(uid)
	return cur == uid
}

// restoreIdentity puts the process's own file-system identity back on this thread.
func restoreIdentity() bool {
	uid, gid := os.Geteuid(), os.Getegid()
	_, _ = unix.SetfsuidRetUid(uid)
	_, _ = unix.SetfsgidRetGid(gid)
	cu, _ := unix.SetfsuidRetUid(uid)
	cg, _ := unix.SetfsgidRetGid(gid)
	return cu == uid && cg == gid && unix.Setgroups(identity.groups) == nil
}

// asIdentity runs fn as uid:gid on this goroutine's thread. false: fn did not run.
func asIdentity(_ context.Context, uid, gid int, fn func()) (ran bool) {
	if identityCheck() != nil {
		return false
	}
	runtime.LockOSThread()
	defer func() {
		if restoreIdentity() {
			runtime.UnlockOSThread()
		}
	}()
	if !takeIdentity(uid, gid) {
		return false
	}
	fn()
	return true
}

// LocalReadsAvailable says whether this process can serve local reads (it can take
// another file-system identity); the error says why not.
func LocalReadsAvailable() error { return identityCheck() }
