package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"os"
	"path"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
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
	ws, err := fs.FromFD(t.Dir, int(root.Fd()))
	if err != nil {
		return fail(err)
	}
	files := &fs.Handlers{WS: ws}
	s := &Server{log: slog.New(slog.DiscardHandler), ws: ws, files: files, idle: newIdleRelease(0)}
	s.ops = map[string]op.Handler{agent.OpRead: files.Read, agent.OpStat: files.Stat}
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
		l.s.ws.Root().Close()
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

// localMax bounds what a local read answers: the answer is gathered while the thread
// reads as the workspace's user, and handed on only once the thread is cws's again, so
// that no host code (the caller's writer) ever runs as that user. Larger reads, and
// reads with no bound, go to the agent, which streams them.
const localMax = 64 << 20

func (l *local) Answer(ctx context.Context, h *agent.Header, body []byte, w io.Writer) bool {
	run, ok := l.s.ops[h.Op]
	if !ok || h.Stream || h.ID != "" {
		return false
	}
	if h.Op == agent.OpRead {
		// Decoded once: to see that the read is bounded, and for the read itself.
		a, ok := boundedRead(h.Args)
		if !ok {
			return false
		}
		run = func(ctx context.Context, _ json.RawMessage, _ []byte, r *op.Responder) (any, error) {
			return l.s.files.ReadDecoded(ctx, a, r)
		}
	}
	if !l.enter() {
		return false
	}
	defer l.leave()
	var buf bytes.Buffer
	r := op.NewResponder(&buf)
	var res any
	var err error
	if !asIdentity(l.uid, l.gid, func() { res, err = run(ctx, h.Args, body, r) }) {
		return false
	}
	if errors.Is(err, iofs.ErrPermission) && buf.Len() == 0 && !r.Holding() {
		return false // refused to the workspace's user as cws opens: the agent is the judge
	}
	done, out := doneFrame(res, err)
	_ = r.Send(done, out)
	_, _ = w.Write(buf.Bytes())
	return true
}

// ReadLocal implements agent.LocalReader: Answer's read, with no frames between the
// read and its caller. The data is gathered as the workspace's user and written to w
// once the thread is cws's again, as Answer does.
func (l *local) ReadLocal(ctx context.Context, a agent.ReadArgs, w io.Writer) (agent.ReadResult, bool, error) {
	if !bounded(a) || !l.enter() {
		return agent.ReadResult{}, false, nil
	}
	defer l.leave()
	var data heldData
	var res any
	var err error
	if !asIdentity(l.uid, l.gid, func() { res, err = l.s.files.ReadDecoded(ctx, a, &data) }) {
		return agent.ReadResult{}, false, nil
	}
	if errors.Is(err, iofs.ErrPermission) && len(data) == 0 {
		return agent.ReadResult{}, false, nil // refused to the workspace's user as cws opens: the agent is the judge
	}
	if len(data) > 0 {
		if _, werr := w.Write(data); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return agent.ReadResult{}, true, wireError(err)
	}
	r, _ := res.(agent.ReadResult)
	return r, true, nil
}

// heldData gathers a local read's data.
type heldData []byte

func (d *heldData) Hold(_ string, p []byte) error {
	*d = append(*d, p...)
	return nil
}

// boundedRead decodes a read's arguments and says whether it asks for at most
// localMax bytes.
func boundedRead(args json.RawMessage) (agent.ReadArgs, bool) {
	var a agent.ReadArgs
	if json.Unmarshal(args, &a) != nil {
		return a, false
	}
	return a, bounded(a)
}

// bounded says whether a read asks for at most localMax bytes.
func bounded(a agent.ReadArgs) bool {
	return (a.MaxSize > 0 && a.MaxSize <= localMax) || (a.Length > 0 && a.Length <= localMax)
}

// The identity switch. A thread's credentials are its own under Linux (the raw
// syscalls change only the calling thread), so a call locks its goroutine to its
// thread, takes the workspace's fsuid and fsgid with no supplementary groups, runs, and
// puts the process's own back before the thread serves anyone else. Were that ever to
// fail, cws stops (asIdentity). (Go starts new
// threads from a clean template thread while a goroutine is locked, so none inherits
// the switched credentials.)

var identity struct {
	once   sync.Once
	err    error
	groups []int // the process's supplementary groups, put back after each call
	// The process's own effective uid and gid, put back after each call: read once (two
	// system calls fewer per read; cws never changes them).
	uid, gid int
}

// identityCheck says, once, whether this process can take another identity at all:
// it tries, on a goroutine of its own, so a failure costs only that goroutine's thread.
func identityCheck() error {
	identity.once.Do(func() {
		groups, err := unix.Getgroups()
		if err != nil {
			identity.err = fmt.Errorf("local reads: read the process's groups: %w", err)
			return
		}
		identity.groups = groups
		identity.uid, identity.gid = os.Geteuid(), os.Getegid()
		type probe struct{ took, back bool }
		done := make(chan probe)
		go func() {
			runtime.LockOSThread()
			ok, restore := takeIdentity(65534, 65534)
			back := restore()
			if back {
				runtime.UnlockOSThread()
			} // else the thread ends with this goroutine
			done <- probe{ok, back}
		}()
		switch p := <-done; {
		case !p.back:
			identity.err = errors.New("local reads: a thread could not take cws's own identity back after trying the workspace's (a security module or seccomp filter refusing setfsuid, setfsgid or setgroups?); reads go to the agent")
		case !p.took:
			identity.err = errors.New("local reads need CAP_SETUID and CAP_SETGID (root) to read as the workspace's user")
		}
	})
	return identity.err
}

// takeIdentity drops this thread's supplementary groups and sets its fsgid and fsuid.
// ok says whether all took (setfs*id return the previous value; asked for id -1, which
// changes nothing and costs no new credentials, they return the current one); restore
// puts back what was changed and says whether it could.
func takeIdentity(uid, gid int) (ok bool, restore func() bool) {
	if unix.Setgroups(nil) != nil {
		return false, func() bool { return true } // nothing changed
	}
	restore = putBack
	_, _ = unix.SetfsgidRetGid(gid)
	if currentFSGID() != gid {
		return false, restore
	}
	_, _ = unix.SetfsuidRetUid(uid)
	return currentFSUID() == uid, restore
}

// restoreIdentity puts the process's own file-system identity and groups back on this
// thread.
func restoreIdentity() bool {
	uid, gid := identity.uid, identity.gid
	_, _ = unix.SetfsuidRetUid(uid)
	_, _ = unix.SetfsgidRetGid(gid)
	return currentFSUID() == uid && currentFSGID() == gid && unix.Setgroups(identity.groups) == nil
}

// currentFSUID and currentFSGID read this thread's fsuid and fsgid: setfs*id of an
// invalid id ((uid_t)-1) returns the current one and changes nothing.
func currentFSUID() int { cur, _ := unix.SetfsuidRetUid(-1); return cur }
func currentFSGID() int { cur, _ := unix.SetfsgidRetGid(-1); return cur }

// putBack is restoreIdentity; tests make it fail.
var putBack = restoreIdentity

// asIdentity runs fn as uid:gid on this goroutine's thread. false: fn did not run.
// Should cws's own identity not come back (a kernel out of memory for new
// credentials, or a security module or seccomp filter refusing the calls), the
// process stops, for its supervisor to start again: any
// code of cws's could run next on that thread, as the workspace's user, and no caller
// may be left waiting for an answer either, so failing whole is the only safe way.
func asIdentity(uid, gid int, fn func()) bool {
	if identityCheck() != nil {
		return false
	}
	runtime.LockOSThread()
	ok, restore := takeIdentity(uid, gid)
	defer func() {
		for try := 0; ; try++ {
			if restore() {
				runtime.UnlockOSThread()
				return
			}
			if try == 2 {
				// Straight to the open descriptor: a log handler could open files, as
				// the workspace's user.
				_, _ = os.Stderr.WriteString(`level=ERROR msg="local reads: a thread could not take cws's own identity back (setfsuid, setfsgid or setgroups failed three times); stopping cws rather than run on as the workspace's user"` + "\n")
				os.Exit(70) // EX_SOFTWARE
			}
			time.Sleep(time.Millisecond)
		}
	}()
	if !ok {
		return false
	}
	fn()
	return true
}

// LocalReadsAvailable says whether this process can serve local reads (it can take
// another file-system identity); the error says why not.
func LocalReadsAvailable() error { return identityCheck() }
