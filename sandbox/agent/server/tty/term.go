package tty

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/charmbracelet/x/vt"
	"golang.org/x/sys/unix"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/exec"
)

// Bounds of one terminal.
const (
	// drainAfterExit is how long output is still read after the program exited while
	// something it left holds the terminal open; then its group is killed.
	drainAfterExit = 250 * time.Millisecond
	// inputTimeout bounds one write of input into a terminal whose program reads none.
	inputTimeout = 5 * time.Second
	// emuLines is how many lines scrolled off the emulator's screen it keeps.
	emuLines = 1000
	// The emulator is fed from the scrollback, apart from the reads (it parses a few
	// MB/s, the PTY gives far more): fed emuChunk at a time, and when it lags by more
	// than emuLag it skips to the last emuSkipTo bytes. In the background it is fed at
	// most every emuEvery, so a flood of output costs it a fraction of a core; a
	// screen read catches it up at once.
	emuChunk  = 64 << 10
	emuLag    = 256 << 10
	emuSkipTo = 16 << 10
	emuEvery  = 50 * time.Millisecond
)

// Term is one program on a pseudo-terminal.
type Term struct {
	id         string
	argv       []string
	cmd        *exec.Prepared
	pid        int
	ptmx       *os.File // non-blocking: Close ends a pending Read
	started    time.Time
	idle       time.Duration
	unenforced bool
	done       chan struct{} // closed once the program ended and its output was read

	// typists counts the viewers that may type: while there are none, the emulator
	// answers the program's queries (cursor position, device attributes) itself.
	typists atomic.Int32
	replies chan []byte
	title   atomic.Pointer[string]
	fedKick chan struct{} // 1-buffered: output waits for the emulator

	// emuMu guards the emulator and what it was fed; it is taken before mu.
	emuMu sync.Mutex
	emu   *vt.Emulator
	fed   int64 // the scrollback offset the emulator has read to

	mu       sync.Mutex
	ring     ring
	cols     int
	rows     int
	viewers  map[*viewer]struct{}
	active   time.Time     // last input, output or detach
	lastOut  time.Time     // last output
	changed  chan struct{} // closed and replaced on output and at the end
	reason   string        // why it ends, once known
	exitCode *int
	endTime  time.Time
	isEnded  bool
	sigOnce  sync.Once
}

func newTerm(id string, argv []string, cmd *exec.Prepared, ptmx *os.File, cols, rows int, idle time.Duration) *Term {
	now := time.Now()
	t := &Term{
		id: id, argv: argv, cmd: cmd, pid: cmd.Process.Pid, ptmx: ptmx, started: now.UTC(), idle: idle,
		unenforced: cmd.Unenforced, done: make(chan struct{}), replies: make(chan []byte, 16),
		ring: newRing(agent.TTYScrollback), emu: vt.NewEmulator(cols, rows), cols: cols, rows: rows, fedKick: make(chan struct{}, 1),
		viewers: map[*viewer]struct{}{}, active: now, lastOut: now, changed: make(chan struct{}),
	}
	t.emu.SetScrollbackSize(emuLines)
	t.emu.SetCallbacks(vt.Callbacks{Title: func(s string) { t.title.Store(&s) }})
	return t
}

// run reads the terminal until its program ended, then marks it ended.
func (t *Term) run(log *slog.Logger) {
	go t.answer()
	go t.feed()
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 32<<10)
		for {
			n, err := t.ptmx.Read(buf)
			if n > 0 {
				t.output(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	waited := make(chan int, 1)
	go func() {
		err := t.cmd.Wait()
		code, _ := exec.ExitStatus(t.cmd.Cmd, err)
		waited <- code
	}()
	var idle <-chan time.Time
	if t.idle > 0 {
		tk := time.NewTicker(min(max(t.idle/10, 50*time.Millisecond), 10*time.Second))
		defer tk.Stop()
		idle = tk.C
	}
	var code int
wait:
	for {
		select {
		case code = <-waited:
			break wait
		case <-idle:
			if t.idleFor() >= t.idle {
				t.end(agent.TTYIdle)
			}
		}
	}
	select {
	case <-read:
	case <-time.After(drainAfterExit):
	}
	// What the program left in its group goes with it, and nothing more is read.
	_ = syscall.Kill(-t.pid, syscall.SIGKILL)
	t.ptmx.Close()
	<-read
	if c, ok := t.emu.InputPipe().(io.Closer); ok {
		c.Close() // ends answer
	}
	t.mu.Lock()
	t.exitCode, t.endTime, t.isEnded = &code, time.Now().UTC(), true
	if t.reason == "" {
		t.reason = agent.TTYExited
	}
	t.notify()
	t.mu.Unlock()
	close(t.done)
	log.Info("terminal ended", "id", t.id, "argv0", t.argv[0], "code", code, "reason", t.reason)
}

// answer types the emulator's answers to the program's queries into the terminal
// while no viewer may type (a viewer's own terminal answers them then). It never
// blocks the emulator: answers that find the queue full are dropped.
func (t *Term) answer() {
	go func() {
		for p := range t.replies {
			_ = t.input(p)
		}
	}()
	defer close(t.replies)
	buf := make([]byte, 256)
	for {
		n, err := t.emu.Read(buf)
		if n > 0 && t.typists.Load() == 0 {
			select {
			case t.replies <- append([]byte(nil), buf[:n]...):
			default:
			}
		}
		if err != nil {
			return
		}
	}
}

// output takes what the program wrote: into the scrollback, the screen and every
// viewer's queue.
func (t *Term) output(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ring.write(p)
	t.active, t.lastOut = time.Now(), time.Now()
	for v := range t.viewers {
		v.push(p)
	}
	t.notify()
	select {
	case t.fedKick <- struct{}{}:
	default:
	}
}

// feed keeps the emulator fed with the output until the terminal ended.
func (t *Term) feed() {
	for {
		select {
		case <-t.fedKick:
			wait := emuEvery
			if t.catchUp() {
				wait *= 5 // a flood: it is skipped anyway, and a screen read catches up
			}
			select { // what comes meanwhile waits for the next round
			case <-time.After(wait):
			case <-t.done:
			}
		case <-t.done:
			t.catchUp()
			return
		}
	}
}

// catchUp feeds the emulator the output it has not read, up to what was written when
// it was called, and reports whether it skipped some.
func (t *Term) catchUp() (skipped bool) {
	t.emuMu.Lock()
	defer t.emuMu.Unlock()
	t.mu.Lock()
	end := t.ring.total
	t.mu.Unlock()
	for t.fed < end {
		t.mu.Lock()
		if t.ring.total-t.fed > emuLag {
			t.fed, skipped = t.ring.total-emuSkipTo, true
		}
		data, next := t.ring.since(t.fed, emuChunk)
		t.mu.Unlock()
		_, _ = t.emu.Write(data)
		t.fed = next
	}
	return skipped
}

func (t *Term) notify() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// idleFor is how long the terminal has had no viewer, input or output.
func (t *Term) idleFor() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.viewers) > 0 {
		return 0
	}
	return time.Since(t.active)
}

// end hangs up the program's session, and kills its group after hangupGrace; reason
// is why, unless it ended already.
func (t *Term) end(reason string) {
	t.mu.Lock()
	if t.isEnded {
		t.mu.Unlock()
		return
	}
	if t.reason == "" {
		t.reason = reason
	}
	t.mu.Unlock()
	t.sigOnce.Do(func() {
		_ = syscall.Kill(-t.pid, syscall.SIGHUP)
		_ = syscall.Kill(-t.pid, syscall.SIGCONT) // a stopped job takes its hangup
		go func() {
			select {
			case <-t.done:
			case <-time.After(hangupGrace):
				_ = syscall.Kill(-t.pid, syscall.SIGKILL)
			}
		}()
	})
}

func (t *Term) ended() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.isEnded
}

func (t *Term) endedAt() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.endTime
}

// info describes the terminal.
func (t *Term) info() agent.TTYInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	in := agent.TTYInfo{ID: t.id, Argv: t.argv, PID: t.pid, Cols: t.cols, Rows: t.rows, Running: !t.isEnded,
		ExitCode: t.exitCode, EndReason: t.reason, StartedAt: t.started, Viewers: len(t.viewers),
		Unenforced: t.unenforced}
	if title := t.title.Load(); title != nil {
		in.Title = *title
	}
	if !t.isEnded {
		in.EndReason = ""
	} else {
		end := t.endTime
		in.EndedAt = &end
	}
	return in
}

// errEnded refuses what only a running terminal can do.
func (t *Term) errEnded() error {
	return agent.Errorf(agent.CodeInvalid, "", "terminal %s has ended (%s)", t.id, t.reason)
}

// input types p into the terminal.
func (t *Term) input(p []byte) error {
	if t.ended() {
		return t.errEnded()
	}
	t.mu.Lock()
	t.active = time.Now()
	t.mu.Unlock()
	_ = t.ptmx.SetWriteDeadline(time.Now().Add(inputTimeout))
	_, err := t.ptmx.Write(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return agent.Errorf(agent.CodeInvalid, "", "terminal %s takes no input: its program has not read for %s", t.id, inputTimeout)
	}
	if err != nil && t.ended() {
		return t.errEnded()
	}
	return err
}

// resize sets the terminal's size: the kernel tells its foreground group (SIGWINCH).
func (t *Term) resize(cols, rows int) error {
	t.emuMu.Lock()
	defer t.emuMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.isEnded {
		return t.errEnded()
	}
	if err := control(t.ptmx, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)})
	}); err != nil {
		return fmt.Errorf("resize terminal %s: %w", t.id, err)
	}
	t.emu.Resize(cols, rows)
	t.cols, t.rows = cols, rows
	return nil
}

// signal signals the terminal's foreground process group (the program, or the job a
// shell runs in front).
func (t *Term) signal(sig syscall.Signal) error {
	if t.ended() {
		return t.errEnded()
	}
	pgrp := t.pid
	_ = control(t.ptmx, func(fd int) error {
		g, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		if err == nil && g > 1 {
			pgrp = g
		}
		return err
	})
	if err := syscall.Kill(-pgrp, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal terminal %s: %w", t.id, err)
	}
	return nil
}

// control runs fn on f's descriptor without putting f in blocking mode (os.File.Fd
// would).
func control(f *os.File, fn func(fd int) error) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := sc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// screen is the visible rows as text, the cursor and, when asked, the last n lines
// that scrolled off; t.emuMu is held.
func (t *Term) screen(n int) agent.TTYScreen {
	s := agent.TTYScreen{Lines: make([]string, 0, t.emu.Height()), AltScreen: t.emu.IsAltScreen()}
	var b strings.Builder
	w, h := t.emu.Width(), t.emu.Height()
	for y := range h {
		b.Reset()
		for x := range w {
			if c := t.emu.CellAt(x, y); c != nil && c.Content != "" {
				b.WriteString(c.Content)
			}
		}
		s.Lines = append(s.Lines, strings.TrimRight(b.String(), " "))
	}
	cur := t.emu.CursorPosition()
	s.CursorRow, s.CursorCol = cur.Y, cur.X
	if n > 0 {
		if sb := t.emu.Scrollback(); sb != nil {
			lines := sb.Lines()
			for _, l := range lines[max(0, len(lines)-n):] {
				s.Scrollback = append(s.Scrollback, strings.TrimRight(l.String(), " "))
			}
		}
	}
	return s
}
