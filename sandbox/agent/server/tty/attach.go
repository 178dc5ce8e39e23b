package tty

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
)

// Bounds of the viewers.
const (
	// viewerMax is the output one viewer may have waiting to be sent: the scrollback it
	// is replayed, and 256 KiB more. Past it the viewer skips what waits.
	viewerMax = agent.TTYScrollback + 256<<10
	// maxViewers bounds the viewers of one terminal.
	maxViewers = 16
	// maxScreenWait bounds a tty.screen wait.
	maxScreenWait = 10 * time.Minute
)

// viewer is one attached client's queue of output not sent yet.
type viewer struct {
	readOnly bool
	kick     chan struct{} // 1-buffered: there is something to send

	mu      sync.Mutex
	queue   []byte
	skipped int64
}

// push queues p, or, when the viewer is too far behind, drops what waits and p.
func (v *viewer) push(p []byte) {
	v.mu.Lock()
	if len(v.queue)+len(p) > viewerMax {
		v.skipped += int64(len(v.queue) + len(p))
		v.queue = v.queue[:0] // not sent yet: flush hands it over only when it takes it
	} else {
		v.queue = append(v.queue, p...)
	}
	v.mu.Unlock()
	select {
	case v.kick <- struct{}{}:
	default:
	}
}

// flush sends what waits: first how much was skipped, if anything.
func (v *viewer) flush(r *op.Responder) error {
	v.mu.Lock()
	q, skipped := v.queue, v.skipped
	v.queue, v.skipped = nil, 0
	v.mu.Unlock()
	if skipped > 0 {
		if err := r.Event(agent.EventSkipped, []byte(strconv.FormatInt(skipped, 10))); err != nil {
			return err
		}
	}
	if len(q) > 0 {
		return r.Event(agent.EventData, q)
	}
	return nil
}

// attach adds a viewer, with the scrollback queued unless noReplay.
func (t *Term) attach(readOnly, noReplay bool) (*viewer, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.viewers) >= maxViewers {
		return nil, &agent.WireError{Code: agent.CodeTooLarge, Rule: "viewers",
			Message: fmt.Sprintf("terminal %s has %d viewers, the most it takes", t.id, maxViewers)}
	}
	v := &viewer{readOnly: readOnly, kick: make(chan struct{}, 1)}
	if !noReplay {
		v.queue, _ = t.ring.since(0, 0)
		v.kick <- struct{}{}
	}
	t.viewers[v] = struct{}{}
	if !readOnly {
		t.typists.Add(1)
	}
	return v, nil
}

func (t *Term) detach(v *viewer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.viewers, v)
	if !v.readOnly {
		t.typists.Add(-1)
	}
	t.active = time.Now()
}

// Attach streams a terminal to a viewer until its program ends or the host goes
// (agent.TTYAttachArgs).
func (m *Manager) Attach(ctx context.Context, args json.RawMessage, _ []byte, r *op.Responder) (any, error) {
	var a agent.TTYAttachArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	t, err := m.lookup(a.ID)
	if err != nil {
		return nil, err
	}
	v, err := t.attach(a.ReadOnly, a.NoReplay)
	if err != nil {
		return nil, err
	}
	defer t.detach(v)
	if r.In != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := r.In.Read(buf)
				if n > 0 && !a.ReadOnly {
					_ = t.input(buf[:n]) // an ended terminal ends the call below
				}
				if err != nil {
					return
				}
			}
		}()
	}
	for {
		if err := v.flush(r); err != nil {
			return nil, err
		}
		select {
		case <-v.kick:
		case <-t.done:
			if err := v.flush(r); err != nil {
				return nil, err
			}
			return t.info(), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Screen reads a terminal's screen, after its waits (agent.TTYScreenArgs).
func (m *Manager) Screen(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.TTYScreenArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	var re *regexp.Regexp
	if a.WaitFor != "" {
		var err error
		if re, err = regexp.Compile(a.WaitFor); err != nil {
			return nil, &agent.WireError{Code: agent.CodeInvalid, Path: "waitFor", Message: fmt.Sprintf("waitFor is not a regexp: %v", err)}
		}
	}
	if a.TimeoutMS < 0 || a.WaitIdleMS < 0 || a.Scrollback < 0 {
		return nil, agent.Errorf(agent.CodeInvalid, "", "timeoutMs, waitIdleMs and scrollback must not be negative")
	}
	t, err := m.lookup(a.ID)
	if err != nil {
		return nil, err
	}
	timeout := min(time.Duration(a.TimeoutMS)*time.Millisecond, maxScreenWait)
	waitIdle := time.Duration(a.WaitIdleMS) * time.Millisecond
	deadline := time.Now().Add(timeout)
	for {
		t.mu.Lock()
		changed, ended := t.changed, t.isEnded
		t.mu.Unlock()
		t.catchUp() // all the output up to changed and ended
		t.emuMu.Lock()
		s := t.screen(a.Scrollback)
		t.emuMu.Unlock()
		t.mu.Lock()
		quiet := time.Since(t.lastOut)
		t.mu.Unlock()
		matched := re != nil && matches(re, s.Lines)
		s.Matched = matched
		if (re == nil || matched) && quiet >= waitIdle || ended {
			s.Info = t.info()
			return s, nil
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			s.Info, s.TimedOut = t.info(), true
			return s, nil
		}
		if re == nil || matched {
			wait = min(wait, waitIdle-quiet)
		}
		tm := time.NewTimer(wait)
		select {
		case <-changed:
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			return nil, ctx.Err()
		}
		tm.Stop()
	}
}

func matches(re *regexp.Regexp, lines []string) bool {
	for _, l := range lines {
		if re.MatchString(l) {
			return true
		}
	}
	return false
}
