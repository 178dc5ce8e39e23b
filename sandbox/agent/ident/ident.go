// Package ident keeps the agent's identity apart from the workspace user's.
//
// cws-agent runs as a uid of its own (the agent uid), never as the workspace user whose
// code it runs: a process of the workspace user can then not signal it, ptrace it, read
// its /proc entries (environment, memory, descriptors) or write where its socket lives,
// whatever its dumpable flag says. The agent still has to act as the workspace user:
//
//   - every file it touches in the workspace is opened with the workspace user's fs
//     identity (setfsuid/setfsgid on every thread, UseToolFS), so permissions are the
//     user's and new files belong to the user;
//   - every process it starts runs as the workspace user, with no capability
//     (Credential, applied by the kernel between fork and exec);
//   - the few files of its own (its request marks) are written with its own fs
//     identity, on a locked thread that switches back (Private).
//
// For that it keeps three capabilities, and only these: CAP_SETUID and CAP_SETGID (to
// take the user's fs identity and to start processes as the user) and CAP_KILL (to
// signal the user's processes, which no longer share its uid). They are in its
// permitted and effective sets only, never inheritable or ambient, so nothing it
// starts gets them; no-new-privileges keeps any later exec from gaining more.
//
// Same-uid mode (a Kubernetes pod: the agent starts as the tool user, with no
// capability at all) has nothing to switch: UseToolFS of the agent's own ids changes
// nothing and takes no tool identity, so Credential is nil (processes inherit the
// agent's own credentials, which are the tool user's; a Credential would call
// setgroups, which needs CAP_SETGID) and Private runs its function as it is. What keeps
// the tools from the agent there is a scoped Landlock domain (package launch).
package ident

import (
	"runtime"
	"sync/atomic"
	"syscall"
)

// Tool is the workspace user: the identity of every file and process the agent makes
// for it.
type Tool struct{ UID, GID int }

// tool is set once by UseToolFS; nil while the agent runs as the tool user itself (tests
// that serve in-process, and agents of older containers).
var tool atomic.Pointer[Tool]

// Current is the tool identity the process took with UseToolFS, if any.
func Current() (Tool, bool) {
	t := tool.Load()
	if t == nil {
		return Tool{}, false
	}
	return *t, true
}

// UseToolFS gives every thread of the process the tool user's fs identity. Threads
// created later inherit it from the thread that creates them. It needs CAP_SETUID and
// CAP_SETGID; the kernel reports success either way, so the result is read back.
// When t is the process's own effective uid and gid (same-uid mode) there is nothing
// to take: it succeeds without a capability and takes no tool identity.
func UseToolFS(t Tool) error {
	if Same(t) {
		tool.Store(nil)
		return nil
	}
	if err := allThreads(syscall.SYS_SETFSGID, t.GID); err != nil {
		return err
	}
	if err := allThreads(syscall.SYS_SETFSUID, t.UID); err != nil {
		return err
	}
	if fsuid, fsgid := currentFS(); fsuid != t.UID || fsgid != t.GID {
		return syscall.EPERM
	}
	tool.Store(&t)
	return nil
}

// Private runs fn with the agent's own fs identity (its effective uid and gid) on a
// locked thread, and puts the tool identity back before the thread runs anything else.
// Use it for the agent's private state, never for the workspace.
func Private(fn func() error) error {
	t, ok := Current()
	if !ok {
		return fn()
	}
	runtime.LockOSThread()
	syscall.RawSyscall(syscall.SYS_SETFSGID, uintptr(syscall.Getegid()), 0, 0)
	syscall.RawSyscall(syscall.SYS_SETFSUID, uintptr(syscall.Geteuid()), 0, 0)
	defer func() {
		syscall.RawSyscall(syscall.SYS_SETFSUID, uintptr(t.UID), 0, 0)
		syscall.RawSyscall(syscall.SYS_SETFSGID, uintptr(t.GID), 0, 0)
		if fsuid, fsgid := currentFS(); fsuid != t.UID || fsgid != t.GID {
			// Never go on as the agent where the tool user is meant: the agent dies
			// and init starts a fresh one.
			panic("cws-agent: could not put the tool user's fs identity back")
		}
		runtime.UnlockOSThread()
	}()
	return fn()
}

// Same reports whether t is the process's own effective uid and gid: the agent is the
// tool user (same-uid mode).
func Same(t Tool) bool { return t.UID == syscall.Geteuid() && t.GID == syscall.Getegid() }

// Credential is what a process the agent starts runs as: the tool user, with the tool
// group as its only group. nil while no tool identity was taken, or when the tool user
// is the process's own (the process's own identity is then inherited, as before: a
// Credential, even of the same ids, would call setgroups, which needs CAP_SETGID).
func Credential() *syscall.Credential {
	t, ok := Current()
	if !ok || Same(t) {
		return nil
	}
	return &syscall.Credential{Uid: uint32(t.UID), Gid: uint32(t.GID), Groups: []uint32{uint32(t.GID)}}
}

// currentFS reads the calling thread's fs uid and gid: setfsuid returns the previous
// value, and -1 is never valid, so the call changes nothing.
func currentFS() (uid, gid int) {
	u, _, _ := syscall.RawSyscall(syscall.SYS_SETFSUID, ^uintptr(0), 0, 0)
	g, _, _ := syscall.RawSyscall(syscall.SYS_SETFSGID, ^uintptr(0), 0, 0)
	return int(int32(u)), int(int32(g))
}

func allThreads(trap uintptr, id int) error {
	_, _, errno := syscall.AllThreadsSyscall(trap, uintptr(id), 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
