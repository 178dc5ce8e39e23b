package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
)

func needBash(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash on this host")
	}
}

func openTTY(t *testing.T, c *agent.Client, a agent.TTYOpenArgs) agent.TTYInfo {
	t.Helper()
	in, err := c.TTYOpen(ctxT(t), a)
	if err != nil {
		t.Fatalf("open %v: %v", a.Argv, err)
	}
	t.Cleanup(func() { _, _ = c.TTYClose(context.Background(), in.ID) })
	return in
}

// screenFor waits for re on the screen and fails the test when it does not come.
func screenFor(t *testing.T, c *agent.Client, id, re string) agent.TTYScreen {
	t.Helper()
	s, err := c.TTYScreen(ctxT(t), agent.TTYScreenArgs{ID: id, WaitFor: re, TimeoutMS: 15000})
	if err != nil {
		t.Fatalf("screen of %s: %v", id, err)
	}
	if !s.Matched {
		if os.Getenv("TTY_DEBUG") != "" {
			out, _ := exec.Command("sh", "-c", fmt.Sprintf("for p in $(pgrep -s %d); do echo $p $(cat /proc/$p/comm) $(cat /proc/$p/wchan); cat /proc/$p/stack; done", s.Info.PID)).CombinedOutput()
			t.Logf("processes of the session:\n%s", out)
			co := newCollector()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			_, _ = c.TTYAttach(ctx, agent.TTYAttachArgs{ID: id}, nil, co.event)
			cancel()
			t.Logf("raw: %q", co.text())
		}
		t.Fatalf("%q never showed on the screen:\n%s", re, strings.Join(s.Lines, "\n"))
	}
	return s
}

func typeInto(t *testing.T, c *agent.Client, id, text string) {
	t.Helper()
	if err := c.TTYInput(ctxT(t), id, []byte(text)); err != nil {
		t.Fatalf("input %q: %v", text, err)
	}
}

func TestTTYShellEchoesAndResizes(t *testing.T) {
	needBash(t)
	c, _, _ := pipeAgent(t)
	in := openTTY(t, c, agent.TTYOpenArgs{Cols: 80, Rows: 24})
	if in.Argv[0] != "bash" || !in.Running || in.PID <= 0 || in.Cols != 80 || in.Rows != 24 {
		t.Fatalf("opened: %+v", in)
	}
	typeInto(t, c, in.ID, "echo hello-$((6*7)); stty size\r")
	s := screenFor(t, c, in.ID, `^24 80$`)
	if !slicesContain(s.Lines, "hello-42") || len(s.Lines) != 24 {
		t.Fatalf("screen:\n%s", strings.Join(s.Lines, "\n"))
	}
	if err := c.TTYResize(ctxT(t), agent.TTYResizeArgs{ID: in.ID, Cols: 100, Rows: 30}); err != nil {
		t.Fatal(err)
	}
	typeInto(t, c, in.ID, "stty size\r")
	s = screenFor(t, c, in.ID, `^30 100$`)
	if len(s.Lines) != 30 {
		t.Fatalf("%d lines after the resize to 30 rows", len(s.Lines))
	}
	if got, _ := c.TTYGet(ctxT(t), in.ID); got.Cols != 100 || got.Rows != 30 {
		t.Fatalf("get after resize: %+v", got)
	}
}

func slicesContain(lines []string, s string) bool {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// sigintIgnored reports whether this process was started with SIGINT ignored (a job
// put in the background by a non-interactive shell): its children inherit that, and
// no ^C can reach them.
func sigintIgnored() bool {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "SigIgn:"); ok {
			m, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return m&(1<<(int(syscall.SIGINT)-1)) != 0
		}
	}
	return false
}

func TestTTYCtrlCEndsTheJobNotTheShell(t *testing.T) {
	needBash(t)
	if sigintIgnored() {
		t.Skip("this test process ignores SIGINT (started in the background), and so would the terminal's programs")
	}
	c, _, _ := pipeAgent(t)
	in := openTTY(t, c, agent.TTYOpenArgs{})
	typeInto(t, c, in.ID, "PS1='P> '\r")
	// ^C typed, as a person would (the line discipline signals the foreground job), and
	// tty.signal, which signals the foreground group.
	for i, interrupt := range []func(){
		func() { typeInto(t, c, in.ID, "\x03") },
		func() { _ = c.TTYSignal(ctxT(t), agent.TTYSignalArgs{ID: in.ID, Signal: "INT"}) },
	} {
		// The job prints its marker and becomes sleep: once the marker shows, sleep is
		// the foreground job.
		typeInto(t, c, in.ID, fmt.Sprintf("sh -c 'echo go-%d; exec sleep 100'\r", i))
		screenFor(t, c, in.ID, fmt.Sprintf(`^go-%d$`, i))
		back := false
		for range 50 {
			interrupt()
			s, err := c.TTYScreen(ctxT(t), agent.TTYScreenArgs{ID: in.ID, WaitFor: `^P>$`, TimeoutMS: 300})
			if err != nil {
				t.Fatal(err)
			}
			if back = s.Matched; back {
				break
			}
		}
		if !back {
			s, _ := c.TTYScreen(ctxT(t), agent.TTYScreenArgs{ID: in.ID})
			t.Fatalf("round %d: sleep 100 was never interrupted:\n%s", i, strings.Join(s.Lines, "\n"))
		}
		typeInto(t, c, in.ID, fmt.Sprintf("echo status-$?-%d\r", i))
		screenFor(t, c, in.ID, fmt.Sprintf(`^status-130-%d$`, i))
	}
	typeInto(t, c, in.ID, "echo alive\r")
	screenFor(t, c, in.ID, `^alive$`)
	if err := c.TTYSignal(ctxT(t), agent.TTYSignalArgs{ID: in.ID, Signal: "BOGUS"}); !errors.Is(err, agent.ErrInvalid) {
		t.Fatalf("unknown signal: %v", err)
	}
}

func TestTTYExitCodeAndEndReasons(t *testing.T) {
	c, _, _ := pipeAgent(t)
	in := openTTY(t, c, agent.TTYOpenArgs{Argv: []string{"sh", "-c", "echo bye; exit 3"}})
	s, err := c.TTYScreen(ctxT(t), agent.TTYScreenArgs{ID: in.ID, WaitFor: "never", TimeoutMS: 15000})
	if err != nil {
		t.Fatal(err)
	}
	if s.Info.Running || s.Info.ExitCode == nil || *s.Info.ExitCode != 3 || s.Info.EndReason != agent.TTYExited || s.Lines[0] != "bye" {
		t.Fatalf("after exit: %+v\n%s", s.Info, strings.Join(s.Lines, "\n"))
	}
	if err := c.TTYInput(ctxT(t), in.ID, []byte("x")); !errors.Is(err, agent.ErrInvalid) {
		t.Fatalf("input to an ended terminal: %v", err)
	}

	closed := openTTY(t, c, agent.TTYOpenArgs{Argv: []string{"sleep", "100"}})
	got, err := c.TTYClose(ctxT(t), closed.ID)
	if err != nil || got.Running || got.EndReason != agent.TTYClosed {
		t.Fatalf("close: %+v %v", got, err)
	}

	idle := openTTY(t, c, agent.TTYOpenArgs{Argv: []string{"sleep", "100"}, IdleMS: 100})
	s, err = c.TTYScreen(ctxT(t), agent.TTYScreenArgs{ID: idle.ID, WaitFor: "never", TimeoutMS: 15000})
	if err != nil || s.Info.Running || s.Info.EndReason != agent.TTYIdle {
		t.Fatalf("idle: %+v %v", s.Info, err)
	}
	if _, err := c.TTYGet(ctxT(t), "t999"); !errors.Is(err, agent.ErrNotFound) {
		t.Fatalf("unknown terminal: %v", err)
	}
}

func TestTTYRefusals(t *testing.T) {
	c, _, _ := pipeAgent(t)
	for _, tc := range []struct {
		name       string
		cols, rows int
		field      string
	}{
		{"negative cols", -1, 24, "cols"},
		{"cols over 1000", 1001, 24, "cols"},
		{"negative rows", 80, -5, "rows"},
		{"rows over 1000", 80, 5000, "rows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.TTYOpen(ctxT(t), agent.TTYOpenArgs{Argv: []string{"true"}, Cols: tc.cols, Rows: tc.rows})
			var we *agent.WireError
			if !errors.As(err, &we) || we.Code != agent.CodeInvalid || we.Path != tc.field {
				t.Fatalf("got %v, want invalid naming %s", err, tc.field)
			}
		})
	}
	// The most running terminals.
	openTTY(t, c, agent.TTYOpenArgs{Argv: []string{"sleep", "100"}, Max: 2})
	openTTY(t, c, agent.TTYOpenArgs{Argv: []string{"sleep", "100"}, Max: 2})
	_, err := c.TTYOpen(ctxT(t), agent.TTYOpenArgs{Argv: []string{"sleep", "100"}, Max: 2})
	var we *agent.WireError
	if !errors.As(err, &we) || we.Code != agent.CodeTooLarge || we.Rule != "maxTerminals" {
		t.Fatalf("third terminal of 2: %v", err)
	}
	if _, err := c.TTYOpen(ctxT(t), agent.TTYOpenArgs{Argv: []string{"no-such-program-here"}}); !errors.Is(err, agent.ErrNotFound) {
		t.Fatalf("unknown program: %v", err)
	}
}

// collector gathers an attach's output; it can be made to stop reading.
type collector struct {
	mu      sync.Mutex
	out     bytes.Buffer
	skipped int
	changed chan struct{}
	hold    chan struct{} // while open, the first event blocks
}

func newCollector() *collector { return &collector{changed: make(chan struct{}, 1)} }

func (co *collector) event(ev string, p []byte) error {
	if co.hold != nil {
		<-co.hold
	}
	co.mu.Lock()
	switch ev {
	case agent.EventData:
		co.out.Write(p)
	case agent.EventSkipped:
		co.skipped++
	}
	co.mu.Unlock()
	select {
	case co.changed <- struct{}{}:
	default:
	}
	return nil
}

func (co *collector) text() string {
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.out.String()
}

// waitFor waits until the output holds s.
func (co *collector) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		co.mu.Lock()
		ok := strings.Contains(co.out.String(), s)
		co.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-co.changed:
		case <-deadline:
			t.Fatalf("%q never came; got %q", s, co.text())
		}
	}
}

func attach(t *testing.T, c *agent.Client, a agent.TTYAttachArgs, input *pipeInput, co *collector) (cancel func(), done chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() {
		_, err := c.TTYAttach(ctx, a, input, co.event)
		done <- err
	}()
	return cancel, done
}

// pipeInput is an attach's input that the test types into.
type pipeInput struct{ ch chan []byte }

func newInput() *pipeInput { return &pipeInput{ch: make(chan []byte, 16)} }

func (p *pipeInput) Read(b []byte) (int, error) {
	d, ok := <-p.ch
	if !ok {
		return 0, errors.New("closed")
	}
	return copy(b, d), nil
}

func TestTTYAttachReplaysAndFansOut(t *testing.T) {
	needBash(t)
	c, _, _ := pipeAgent(t)
	in := openTTY(t, c, agent.TTYOpenArgs{})
	typeInto(t, c, in.ID, "echo before-$((40+2))\r")
	screenFor(t, c, in.ID, `^before-42$`)

	// A viewer that types, and a read-only one: both see the scrollback, then the output.
	rwIn, roIn := newInput(), newInput()
	rw, ro := newCollector(), newCollector()
	stopRW, rwDone := attach(t, c, agent.TTYAttachArgs{ID: in.ID}, rwIn, rw)
	stopRO, roDone := attach(t, c, agent.TTYAttachArgs{ID: in.ID, ReadOnly: true}, roIn, ro)
	rw.waitFor(t, "before-42")
	ro.waitFor(t, "before-42")
	rwIn.ch <- []byte("echo typed-$((7*6))\r")
	rw.waitFor(t, "typed-42")
	ro.waitFor(t, "typed-42")
	roIn.ch <- []byte("echo readonly-typed\r") // dropped: a read-only viewer can't type
	rwIn.ch <- []byte("echo marker\r")
	rw.waitFor(t, "\rmarker\r\n")
	if out := rw.text(); strings.Contains(out, "readonly-typed") {
		t.Fatalf("a read-only viewer's input reached the terminal: %q", out)
	}
	if got, _ := c.TTYGet(ctxT(t), in.ID); got.Viewers != 2 {
		t.Fatalf("viewers: %d, want 2", got.Viewers)
	}

	// Detach and attach again: the scrollback has it all.
	stopRW()
	if err := <-rwDone; err == nil {
		t.Fatal("a cancelled attach returned no error")
	}
	again := newCollector()
	stopAgain, againDone := attach(t, c, agent.TTYAttachArgs{ID: in.ID}, newInput(), again)
	again.waitFor(t, "before-42")
	again.waitFor(t, "typed-42")

	// The program's exit ends every attach with its info.
	typeInto(t, c, in.ID, "exit 7\r")
	if err := <-againDone; err != nil {
		t.Fatalf("attach at exit: %v", err)
	}
	if err := <-roDone; err != nil {
		t.Fatalf("read-only attach at exit: %v", err)
	}
	stopAgain()
	stopRO()
}

// TestTTYSlowViewer: a viewer that reads nothing never holds the program up; once it
// reads again it learns how much it skipped.
func TestTTYSlowViewer(t *testing.T) {
	if _, err := exec.LookPath("head"); err != nil {
		t.Skip("no head")
	}
	c, _, _ := pipeAgent(t)
	in := openTTY(t, c, agent.TTYOpenArgs{Argv: []string{"sh", "-c", "sleep 0.3; head -c 30000000 /dev/zero | tr '\\0' x; echo; echo done"}})
	slow := newCollector()
	slow.hold = make(chan struct{})
	stop, done := attach(t, c, agent.TTYAttachArgs{ID: in.ID}, newInput(), slow)
	defer stop()
	// The program ends while the viewer reads nothing.
	s, err := c.TTYScreen(ctxT(t), agent.TTYScreenArgs{ID: in.ID, WaitFor: "never", TimeoutMS: 60000})
	if err != nil || s.Info.Running {
		t.Fatalf("the program did not end while a viewer was stuck: %+v %v", s.Info, err)
	}
	if !slicesContain(s.Lines, "done") {
		t.Fatalf("screen at the end:\n%s", strings.Join(s.Lines, "\n"))
	}
	close(slow.hold)
	if err := <-done; err != nil {
		t.Fatalf("slow attach: %v", err)
	}
	if slow.skipped == 0 {
		t.Fatalf("the slow viewer was sent %d bytes and told of no skip", len(slow.text()))
	}
	if !strings.Contains(slow.text(), "done") {
		t.Fatal("the slow viewer missed the end of the output")
	}
}
