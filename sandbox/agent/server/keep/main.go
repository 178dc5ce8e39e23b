package keep

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cwsdev/cws/sandbox/agent/ident"
)

// Command is the agent's subcommand that runs a keeper: "cws-agent keep <dir>".
const Command = "keep"

// Files of a keeper's directory, besides the records and exitsDir.
const (
	socketName = "keeper.sock"
	lockName   = "keeper.lock" // held (flock) by the one keeper that runs
)

// statusFD is the descriptor on which a keeper says it listens ("ok"), that another
// one already does ("running"), or why it could not.
const statusFD = 3

// startLimit bounds a keeper's start.
const startLimit = 10 * time.Second

// warmThreads is how many OS threads a keeper makes up front. Under a fork bomb the
// pids limit leaves no room for new ones, and a Go program that cannot make a thread
// it needs dies, and every process's output with it; threads made early are kept.
const warmThreads = 4

func socketPath(dir string) string { return filepath.Join(dir, socketName) }

// Main runs a keeper in args[0] until it is killed. It is run by Start, as the agent's
// own uid and without any capability: it reads pipes and answers serve, nothing else.
func Main(args []string, log *slog.Logger) error {
	status := os.NewFile(statusFD, "status")
	report := func(msg string) {
		if status != nil {
			_, _ = status.WriteString(msg + "\n")
			status.Close()
			status = nil
		}
	}
	err := run(args, log, func() { report("ok") }, func() { report("running") })
	if err != nil {
		report(err.Error())
	}
	return err
}

func run(args []string, log *slog.Logger, ready, running func()) error {
	if len(args) != 1 || !filepath.IsAbs(args[0]) {
		return errors.New("usage: cws-agent keep <absolute directory>")
	}
	dir := args[0]
	if err := takeKey(); err != nil { // key.go
		return err
	}
	WarmThreads(warmThreads)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			running()
			return nil
		}
		return fmt.Errorf("lock %s: %w", dir, err)
	}
	k, err := New(dir, log)
	if err != nil {
		return err
	}
	sock := socketPath(dir)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return err
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		return err
	}
	log.Info("process keeper listening", "socket", sock, "uid", os.Getuid(), "lost", len(k.procs))
	ready()
	return k.Serve(l)
}

// Start starts a keeper in dir from the agent binary bin and waits until it listens.
// The keeper runs in a session of its own, as the agent's uid (no credential is given:
// it is no workspace process), and with no capability (exec drops them). Its parent
// reaps it while it lives; init does once the parent died.
func Start(bin, dir string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(bin, Command, dir)
	cmd.Dir = "/"
	cmd.Env = []string{"GOMAXPROCS=1"} // a few pipes to read: one P, fewer threads
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = []*os.File{w} // statusFD
	kr, err := keyPipe()           // key.go
	if err != nil {
		w.Close()
		return fmt.Errorf("start the process keeper: %w", err)
	}
	if kr != nil {
		defer kr.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, kr)
		cmd.Env = append(cmd.Env, envKeyFD+"="+strconv.Itoa(statusFD+1))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = ident.Private(cmd.Start)
	w.Close()
	if err != nil {
		return fmt.Errorf("start the process keeper: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	_ = r.SetReadDeadline(time.Now().Add(startLimit))
	msg, err := io.ReadAll(io.LimitReader(r, 4096))
	switch s := strings.TrimSpace(string(msg)); {
	case s == "ok" || s == "running":
		return nil
	case err != nil:
		return fmt.Errorf("start the process keeper: %w", err)
	case s == "":
		return errors.New("start the process keeper: it ended before it listened")
	default:
		return fmt.Errorf("start the process keeper: %s", s)
	}
}

// WarmThreads makes n OS threads, which the runtime keeps for later: under a fork
// bomb the pids limit leaves no room for new ones, and a Go program that cannot make a
// thread it needs dies. The agent's serve and the keeper both call it first thing.
func WarmThreads(n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			time.Sleep(5 * time.Millisecond)
			runtime.UnlockOSThread()
		}()
	}
	wg.Wait()
}
