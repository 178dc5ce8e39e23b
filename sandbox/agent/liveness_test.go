package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server"
)

// testLiveness notices a silent agent within about a second, so that these tests run
// quickly; production uses the defaults.
func testLiveness(stuck func(error)) agent.Liveness {
	return agent.Liveness{StallAfter: 200 * time.Millisecond, PingTimeout: 300 * time.Millisecond,
		HandshakeTimeout: 500 * time.Millisecond, ConnectTimeout: 2 * time.Second, OnUnresponsive: stuck}
}

// freezer stops an agent as SIGSTOP would: while frozen, the agent's end of every
// connection neither reads nor writes, and (over net.Pipe) the host's writes block.
type freezer struct {
	mu     sync.Mutex
	cond   *sync.Cond
	frozen bool
}

func newFreezer() *freezer {
	f := &freezer{}
	f.cond = sync.NewCond(&f.mu)
	return f
}

func (f *freezer) set(frozen bool) {
	f.mu.Lock()
	f.frozen = frozen
	f.mu.Unlock()
	f.cond.Broadcast()
}

func (f *freezer) wait() {
	f.mu.Lock()
	for f.frozen {
		f.cond.Wait()
	}
	f.mu.Unlock()
}

type frozenConn struct {
	net.Conn
	f *freezer
}

func (c frozenConn) Read(p []byte) (int, error) {
	c.f.wait()
	n, err := c.Conn.Read(p)
	c.f.wait() // what was read when the stop came is handled after it
	return n, err
}

func (c frozenConn) Write(p []byte) (int, error) {
	c.f.wait()
	return c.Conn.Write(p)
}

// stoppableAgent is a real agent (server.Server) whose connections freeze on demand.
// stuck counts the times the client declared it unresponsive.
func stoppableAgent(t *testing.T) (c *agent.Client, dir string, f *freezer, stuck *atomic.Int32) {
	t.Helper()
	return stoppableAgentWith(t, testLiveness)
}

func stoppableAgentWith(t *testing.T, live func(stuck func(error)) agent.Liveness) (c *agent.Client, dir string, f *freezer, stuck *atomic.Int32) {
	t.Helper()
	dir = t.TempDir()
	srv, err := server.New(server.Config{Root: dir, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	f = newFreezer()
	stuck = new(atomic.Int32)
	c = agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) {
		h, a := net.Pipe()
		go srv.ServeConn(frozenConn{a, f})
		return h, nil
	}, "test", nil).WithLiveness(live(func(error) { stuck.Add(1) }))
	t.Cleanup(func() {
		f.set(false)
		c.Shutdown()
		srv.Close()
	})
	return c, dir, f, stuck
}

func wantUnresponsive(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, agent.ErrUnresponsive) || !errors.Is(err, agent.ErrUnavailable) {
		t.Fatalf("%s = %v, want ErrUnresponsive (and ErrUnavailable)", what, err)
	}
}

// waitUntil polls cond for up to 20 s (a generous bound: the conditions here come true
// in about a second).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
	}
}

// A stopped agent holds no call: the write in flight ends with ErrUnresponsive, so do
// the calls after it (the redial's handshake goes unanswered too), and the host is told
// so that it can heal the sandbox. Once the agent runs again, calls work, and the files
// are there.
func TestStoppedAgent(t *testing.T) {
	c, _, f, stuck := stoppableAgent(t)
	ctx := ctxT(t)
	if _, err := c.WriteFile(ctx, agent.WriteArgs{Path: "a.txt", Create: true}, []byte("before")); err != nil {
		t.Fatal(err)
	}
	f.set(true)
	// A write larger than the stream's window blocks on its way out, as well as its answer.
	for _, size := range []int{10, 1 << 20} {
		_, err := c.WriteFile(ctx, agent.WriteArgs{Path: "b.txt", Create: true}, make([]byte, size))
		wantUnresponsive(t, "write to a stopped agent", err)
	}
	_, err := c.Stat(ctx, agent.StatArgs{Path: "a.txt"})
	wantUnresponsive(t, "stat on a stopped agent, on a fresh connection", err)
	if stuck.Load() == 0 {
		t.Fatal("OnUnresponsive was never called")
	}
	f.set(false)
	waitUntil(t, "the agent to answer again", func() bool {
		_, err := c.Ping(ctx)
		return err == nil
	})
	b, _, err := c.ReadFile(ctx, agent.ReadArgs{Path: "a.txt"})
	if err != nil || string(b) != "before" {
		t.Fatalf("read after the agent came back = %q, %v", b, err)
	}
}

// A command in flight on a stopped agent ends as an interrupted command that started,
// and says the agent is not responding.
func TestStoppedAgentCommand(t *testing.T) {
	c, _, f, _ := stoppableAgent(t)
	ctx := ctxT(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, agent.ExecArgs{Argv: []string{"sleep", "30"}, TimeoutMS: 60_000}, nil, nil)
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // the command has started
	f.set(true)
	err := <-done
	var ie *agent.InterruptedError
	if !errors.As(err, &ie) || !ie.Started {
		t.Fatalf("exec on an agent stopped mid-command = %v, want an InterruptedError that started", err)
	}
	wantUnresponsive(t, "exec on a stopped agent", err)
}

// A long command that prints nothing keeps its call: the agent answers the pings.
func TestQuietCommandIsNotStuck(t *testing.T) {
	c, _, _, stuck := stoppableAgent(t)
	r, err := c.Exec(ctxT(t), agent.ExecArgs{Argv: []string{"sleep", "1.5"}, TimeoutMS: 10_000}, nil, nil)
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("a quiet command of 1.5 s (several stall periods) = %+v, %v", r, err)
	}
	if n := stuck.Load(); n != 0 {
		t.Fatalf("a busy agent was declared unresponsive %d times", n)
	}
}

// Shutdown never waits on a stopped agent: it returns, and the calls in flight end.
func TestShutdownStoppedAgent(t *testing.T) {
	// Calls that never see the stall: a minute before they would be pinged.
	c, _, f, _ := stoppableAgentWith(t, func(func(error)) agent.Liveness { return agent.Liveness{StallAfter: time.Minute} })
	ctx := ctxT(t)
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	f.set(true)
	const calls = 8
	errs := make(chan error, calls)
	for i := range calls {
		go func() {
			_, err := c.WriteFile(ctx, agent.WriteArgs{Path: "f" + itoa(i), Create: true}, make([]byte, 300<<10))
			errs <- err
		}()
	}
	time.Sleep(200 * time.Millisecond)
	closed := make(chan struct{})
	go func() { c.Shutdown(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown waited on a stopped agent for 10 s")
	}
	for range calls {
		if err := <-errs; !errors.Is(err, agent.ErrClosed) {
			t.Fatalf("a call in flight at Shutdown = %v, want ErrClosed", err)
		}
	}
	if _, err := c.Ping(ctx); !errors.Is(err, agent.ErrClosed) {
		t.Fatalf("ping after Shutdown = %v, want ErrClosed", err)
	}
}

// Close never waits on a stopped agent either; the client redials after it.
func TestCloseStoppedAgent(t *testing.T) {
	c, _, f, _ := stoppableAgentWith(t, func(func(error)) agent.Liveness { return agent.Liveness{StallAfter: time.Minute} })
	ctx := ctxT(t)
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	f.set(true)
	errs := make(chan error, 1)
	go func() {
		_, err := c.WriteFile(ctx, agent.WriteArgs{Path: "big", Create: true}, make([]byte, 1<<20))
		errs <- err
	}()
	time.Sleep(200 * time.Millisecond)
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited on a stopped agent for 10 s")
	}
	f.set(false)
	if err := <-errs; err != nil { // retried on a fresh stream, applied once
		t.Fatalf("a write in flight at Close = %v, want it retried", err)
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("ping after Close: %v", err)
	}
}

// fakeAgent serves dial with a scripted peer instead of an agent.
func fakeAgent(t *testing.T, serve func(conn net.Conn)) (*agent.Client, *atomic.Int32) {
	t.Helper()
	stuck := new(atomic.Int32)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	c := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) {
		h, a := net.Pipe()
		mu.Lock()
		conns = append(conns, a)
		mu.Unlock()
		wg.Add(1)
		go func() { defer wg.Done(); serve(a) }()
		return h, nil
	}, "test", nil).WithLiveness(testLiveness(func(error) { stuck.Add(1) }))
	t.Cleanup(func() {
		c.Shutdown()
		mu.Lock()
		for _, a := range conns {
			a.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return c, stuck
}

// hello answers the host's handshake as an agent would.
func hello(conn net.Conn) bool {
	if _, err := agent.ReadHello(conn); err != nil {
		return false
	}
	return agent.WriteHello(conn, agent.Hello{Protocol: agent.ProtocolVersion, Version: "fake"}) == nil
}

// muxAgent is a fakeAgent that shakes hands, multiplexes, reads each stream's request
// and hands it to answer with the number of the connection it came on (1, 2, …).
func muxAgent(t *testing.T, answer func(n int32, conn net.Conn, st *yamux.Stream, h *agent.Header)) *agent.Client {
	t.Helper()
	var conns atomic.Int32
	c, _ := fakeAgent(t, func(conn net.Conn) {
		n := conns.Add(1)
		if !hello(conn) {
			return
		}
		sess, err := yamux.Server(conn, agent.YamuxConfig())
		if err != nil {
			return
		}
		defer sess.Close()
		for {
			st, err := sess.AcceptStream()
			if err != nil {
				return
			}
			go func() {
				defer st.Close()
				if h, _, err := agent.ReadFrame(st); err == nil {
					answer(n, conn, st, h)
				}
			}()
		}
	})
	return c
}

// Agents that hold their stream open and never answer, or answer nonsense: every call
// ends, with ErrUnavailable, and Close returns.
func TestMisbehavingAgents(t *testing.T) {
	for _, tc := range []struct {
		name       string
		serve      func(conn net.Conn)
		stuck      bool // the client must declare it unresponsive
		unresponse bool // the call's error must be ErrUnresponsive
	}{
		{"accepts and never answers", func(conn net.Conn) {
			_, _ = io.Copy(io.Discard, conn)
		}, true, true},
		{"shakes hands, then never answers", func(conn net.Conn) {
			if !hello(conn) {
				return
			}
			_, _ = io.Copy(io.Discard, conn)
		}, true, true},
		{"multiplexes, then never answers a call", func(conn net.Conn) {
			if !hello(conn) {
				return
			}
			sess, err := yamux.Server(conn, agent.YamuxConfig())
			if err != nil {
				return
			}
			defer sess.Close()
			for {
				st, err := sess.AcceptStream()
				if err != nil {
					return
				}
				go func() { _, _ = io.Copy(io.Discard, st) }()
			}
		}, true, true},
		{"speaks garbage", func(conn net.Conn) {
			if !hello(conn) {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, conn) }()
			junk := []byte("HTTP/1.1 200 OK\r\n\r\n\x00\x01\x02\xff garbage")
			for {
				if _, err := conn.Write(junk); err != nil {
					return
				}
			}
		}, false, false},
		{"says hello in garbage", func(conn net.Conn) {
			go func() { _, _ = io.Copy(io.Discard, conn) }()
			_, _ = conn.Write([]byte{0, 0, 0, 9, 0, 0, 0, 0, '{', 'n', 'o', 'p', 'e', '!', '!', '!', '!'})
			conn.Close()
		}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, stuck := fakeAgent(t, tc.serve)
			ctx := ctxT(t)
			_, err := c.WriteFile(ctx, agent.WriteArgs{Path: "a", Create: true}, []byte("x"))
			if !errors.Is(err, agent.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("write = %v, want ErrUnavailable, never the caller's deadline", err)
			}
			if tc.unresponse {
				wantUnresponsive(t, "write", err)
			}
			if _, err := c.Exec(ctx, agent.ExecArgs{Argv: []string{"true"}}, nil, nil); !errors.Is(err, agent.ErrUnavailable) {
				t.Fatalf("exec = %v, want ErrUnavailable", err)
			}
			if tc.stuck && stuck.Load() == 0 {
				t.Fatal("OnUnresponsive was never called")
			}
			closed := make(chan struct{})
			go func() { c.Shutdown(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				t.Fatal("Shutdown hung for 10 s")
			}
		})
	}
}

// A call the agent never answers, while it answers pings, ends at the call's own
// timeout with ErrUnresponsive, not when its caller gives up.
func TestCallTimeout(t *testing.T) {
	c, stuck := fakeAgent(t, func(conn net.Conn) {
		if !hello(conn) {
			return
		}
		sess, err := yamux.Server(conn, agent.YamuxConfig())
		if err != nil {
			return
		}
		defer sess.Close()
		for {
			st, err := sess.AcceptStream()
			if err != nil {
				return
			}
			go func() {
				defer st.Close()
				h, _, err := agent.ReadFrame(st)
				if err != nil {
					return
				}
				if h.Op == agent.OpPing {
					_ = agent.WriteFrame(st, &agent.Header{Done: true, Result: []byte("{}")}, nil)
					return
				}
				_, _ = io.Copy(io.Discard, st) // wedged on everything else
			}()
		}
	})
	ctx, cancel := agent.WithCallTimeout(ctxT(t), agent.OpWrite, time.Second)
	defer cancel()
	_, err := c.WriteFile(ctx, agent.WriteArgs{Path: "a", Create: true}, []byte("x"))
	wantUnresponsive(t, "a write the agent never answers", err)
	if n := stuck.Load(); n != 0 {
		t.Fatalf("an agent that answers pings was declared unresponsive %d times", n)
	}
	if _, err := c.Ping(ctxT(t)); err != nil {
		t.Fatalf("ping after a timed-out call: %v", err)
	}
}

// Each call's own timeout follows the timeout or wait it carries.
func TestCallTimeouts(t *testing.T) {
	m := agent.CallMargin
	for _, tc := range []struct {
		name string
		op   string
		args any
		want time.Duration
	}{
		{"write", agent.OpWrite, agent.WriteArgs{}, agent.DefaultCallTimeout},
		{"stat", agent.OpStat, agent.StatArgs{}, agent.DefaultCallTimeout},
		{"search", agent.OpSearch, agent.SearchArgs{}, agent.WalkCallTimeout},
		{"lsp", agent.OpLSP, agent.LSPArgs{}, agent.LSPCallTimeout},
		{"runCommand timeout 600", agent.OpExec, agent.ExecArgs{TimeoutMS: 600_000}, 602*time.Second + m},
		{"exec with a grace", agent.OpExec, agent.ExecArgs{TimeoutMS: 1000, GraceMS: 5000}, 6*time.Second + m},
		{"exec without timeout", agent.OpExec, agent.ExecArgs{}, agent.MaxCommandTimeout + m},
		{"terminal", agent.OpTermRun, agent.TermRunArgs{TimeoutMS: 300_000}, 302*time.Second + m},
		{"readProcessOutput wait", agent.OpProcOutput, agent.ProcOutputArgs{WaitMS: 1000}, time.Second + m},
		{"terminal read wait", agent.OpTermRead, agent.TermReadArgs{WaitMS: 60_000}, time.Minute + m},
		{"read (a stream)", agent.OpRead, agent.ReadArgs{}, 0},
		{"archive (a stream)", agent.OpTarOut, agent.TarOutArgs{}, 0},
	} {
		if got := agent.CallTimeout(tc.op, tc.args); got != tc.want {
			t.Errorf("%s: timeout %s, want %s", tc.name, got, tc.want)
		}
	}
}

// An agent that answers a read with more than it asked for (a peer posing as the
// agent) gets too_large, and the client holds no more than the read's bound: no more
// than length, nor than maxSize past the offset.
func TestReadBoundedAgainstALyingAgent(t *testing.T) {
	for _, tc := range []struct {
		args agent.ReadArgs
		max  int // the most the client may take
	}{
		{agent.ReadArgs{Path: "f", MaxSize: 1000}, 1000},
		{agent.ReadArgs{Path: "f", MaxSize: 1000, Offset: 600}, 400},
		{agent.ReadArgs{Path: "f", Length: 300}, 300},
		{agent.ReadArgs{Path: "f", Length: 300, MaxSize: 1000, Offset: 900}, 100},
	} {
		c := muxAgent(t, func(_ int32, _ net.Conn, st *yamux.Stream, _ *agent.Header) {
			chunk := bytes.Repeat([]byte("x"), 256)
			for range 40 { // 10 KiB, far more than asked
				if agent.WriteFrame(st, &agent.Header{Event: agent.EventData}, chunk) != nil {
					return
				}
			}
			res, _ := json.Marshal(agent.ReadResult{N: 10240})
			_ = agent.WriteFrame(st, &agent.Header{Done: true, Result: res}, nil)
		})
		var got bytes.Buffer
		_, err := c.ReadTo(ctxT(t), tc.args, &got)
		if !errors.Is(err, agent.ErrTooLarge) {
			t.Errorf("%+v: %v, want too_large", tc.args, err)
		}
		if got.Len() > tc.max {
			t.Errorf("%+v: the client took %d bytes, more than the %d asked for", tc.args, got.Len(), tc.max)
		}
	}
}

// An agent whose connection breaks after part of a read's answer: ReadTo does not
// retry it (its retry would give that part again), it fails unavailable with no more
// than the part that came; one that breaks before any data is retried, whole. ReadFile,
// which owns its buffer, reads such a file again from nothing and gets it once.
func TestReadRetriedOnlyBeforeData(t *testing.T) {
	file := bytes.Repeat([]byte("abc"), 100)
	for _, tc := range []struct {
		name  string
		first int // bytes the first connection sends before it breaks
		args  agent.ReadArgs
	}{
		{"part of it, no bound", 200, agent.ReadArgs{Path: "f"}},
		{"part of it, maxSize", 200, agent.ReadArgs{Path: "f", MaxSize: 1000}},
		{"part of it, length", 200, agent.ReadArgs{Path: "f", Length: 300}},
		{"part of it, maxSize at the file's size", 200, agent.ReadArgs{Path: "f", MaxSize: 300}},
		{"before any data", 0, agent.ReadArgs{Path: "f", MaxSize: 300}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := muxAgent(t, func(n int32, conn net.Conn, st *yamux.Stream, _ *agent.Header) {
				if n == 1 {
					if tc.first > 0 {
						_ = agent.WriteFrame(st, &agent.Header{Event: agent.EventData}, file[:tc.first])
					}
					conn.Close() // the agent dies mid-answer
					return
				}
				_ = agent.WriteFrame(st, &agent.Header{Event: agent.EventData}, file)
				res, _ := json.Marshal(agent.ReadResult{N: int64(len(file))})
				_ = agent.WriteFrame(st, &agent.Header{Done: true, Result: res}, nil)
			})
			if tc.args.MaxSize == 1000 { // ReadFile, the same break
				got, r, err := c.ReadFile(ctxT(t), tc.args)
				if err != nil || !bytes.Equal(got, file) || r.N != int64(len(file)) {
					t.Fatalf("ReadFile broken after %d bytes: %v, %d bytes (N %d); want it read again, whole", tc.first, err, len(got), r.N)
				}
				return
			}
			var got bytes.Buffer
			r, err := c.ReadTo(ctxT(t), tc.args, &got)
			if tc.first == 0 {
				if err != nil || !bytes.Equal(got.Bytes(), file) || r.N != int64(len(file)) {
					t.Fatalf("broken before any data: %v, %d bytes (N %d); want it retried, whole", err, got.Len(), r.N)
				}
				return
			}
			if !errors.Is(err, agent.ErrUnavailable) {
				t.Errorf("broken after %d bytes: %v, want unavailable", tc.first, err)
			}
			if got.Len() > tc.first || !bytes.Equal(got.Bytes(), file[:got.Len()]) {
				t.Errorf("broken after %d bytes: the caller got %d bytes (a retry's on top of the first part?)", tc.first, got.Len())
			}
		})
	}
}
