package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
)

// Healer is what a Sandboxes may also do for a sandbox whose agent stopped answering
// (sandbox/docker does). Neither may touch the workspace's files.
type Healer interface {
	// RestartAgent restarts the sandbox's agent in place (continued if it was stopped,
	// then killed and started again by the sandbox's init).
	RestartAgent(ctx context.Context, id string) error
	// Restart restarts the whole sandbox, keeping its workspace volume.
	Restart(ctx context.Context, id string) error
}

// Bounds of a heal.
const (
	// healTimeout bounds a whole heal: the agent's restart, then the container's.
	healTimeout = 2 * time.Minute
	// agentHealWait and containerHealWait bound how long the agent may take to answer
	// after its own restart and after its container's.
	agentHealWait     = 10 * time.Second
	containerHealWait = 60 * time.Second
	// healAwait bounds how long a connect to the agent waits for a heal under way,
	// before it tries anyway.
	healAwait = 20 * time.Second
	// healCooldown is how long after a failed heal a new one is not tried (an agent
	// that cannot be brought back is not restarted on every call).
	healCooldown = 30 * time.Second
)

// healing is a heal of one sandbox, under way until done closes, then cooling down
// until the entry is removed.
type healing struct {
	done   chan struct{}
	cancel context.CancelFunc
}

// heal brings back the agent of a sandbox that stopped answering, in the background:
// it restarts the agent, or, if that does not make it answer, the container, keeping
// the workspace volume either way. A heal already under way (or cooling down after a
// failure) is not repeated, and a sandbox the Service no longer serves (its session
// was deleted) or that is still starting is left alone. Meanwhile, connects to the
// agent wait for it (awaitHeal).
func (s *Service) heal(sandboxID string, cause error) {
	s.mu.Lock()
	_, live := s.agents[sandboxID]
	if _, busy := s.healing[sandboxID]; busy || !live || s.waking[sandboxID] {
		s.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), healTimeout)
	h := &healing{done: make(chan struct{}), cancel: cancel}
	s.healing[sandboxID] = h
	s.mu.Unlock()
	go func() {
		ok := s.runHeal(ctx, sandboxID, cause)
		cancel()
		close(h.done)
		linger := time.Duration(0)
		if !ok {
			linger = healCooldown
		}
		time.AfterFunc(linger, func() {
			s.mu.Lock()
			if s.healing[sandboxID] == h {
				delete(s.healing, sandboxID)
			}
			s.mu.Unlock()
		})
	}()
}

// runHeal restarts the agent, then the container, until the agent answers; it reports
// whether it does. Each outcome is counted (cws_sandbox_healed_total) and logged.
func (s *Service) runHeal(ctx context.Context, sandboxID string, cause error) bool {
	log := s.log.With("sandbox", sandboxID)
	h, ok := s.cfg.Sandboxes.(Healer)
	if !ok {
		log.Error("the workspace agent is not responding, and this sandbox driver cannot restart it", "err", cause)
		s.fobs.Healed("failed")
		return false
	}
	log.Warn("the workspace agent is not responding; restarting it", "err", cause)
	start := time.Now()
	err := h.RestartAgent(ctx, sandboxID)
	if err == nil {
		err = s.agentAnswers(ctx, sandboxID, agentHealWait)
	}
	if err == nil {
		s.fobs.Healed("agent")
		log.Info("workspace agent restarted; it answers again", "took", time.Since(start).Round(time.Millisecond))
		return true
	}
	if !s.serves(sandboxID) {
		log.Info("heal stopped: the session went away", "err", err)
		return true
	}
	log.Warn("restarting the workspace agent did not bring it back; restarting its container (the workspace volume stays)", "err", err)
	err = h.Restart(ctx, sandboxID)
	if err == nil {
		err = s.agentAnswers(ctx, sandboxID, containerHealWait)
	}
	if err == nil {
		s.fobs.Healed("container")
		log.Info("workspace container restarted; its agent answers again", "took", time.Since(start).Round(time.Millisecond))
		return true
	}
	if !s.serves(sandboxID) {
		log.Info("heal stopped: the session went away", "err", err)
		return true
	}
	s.fobs.Healed("failed")
	log.Error("could not bring the workspace agent back; calls will fail until it answers", "err", err)
	return false
}

// starting marks a sandbox whose agent has not answered yet (waitReady) until the
// returned func is called: heal leaves it alone.
func (s *Service) starting(sandboxID string) (done func()) {
	s.mu.Lock()
	s.waking[sandboxID] = true
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.waking, sandboxID)
		s.mu.Unlock()
	}
}

// serves reports whether the sandbox is still one of the Service's (its client was not
// dropped: its session was not deleted, lost or restarted).
func (s *Service) serves(sandboxID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.agents[sandboxID]
	return ok
}

// agentAnswers pings the sandbox's agent on connections of its own (the session's
// client waits for the heal) until it answers, for at most wait.
func (s *Service) agentAnswers(ctx context.Context, sandboxID string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	live := s.cfg.AgentLiveness
	live.OnUnresponsive = nil
	c := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) {
		return s.attach(ctx, sandboxID)
	}, versionString(), s.log.With("sandbox", sandboxID)).WithLiveness(live)
	defer c.Shutdown()
	var err error
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		if _, err = c.Ping(ctx); err == nil {
			return nil
		}
		if errors.Is(err, ErrSessionLost) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the agent did not answer within %s: %w", wait, err)
		case <-time.After(delay):
		}
	}
}

// awaitHeal waits for a heal of the sandbox under way (at most healAwait, or until ctx
// ends), so that a call made meanwhile reaches the healed agent instead of the stuck one.
func (s *Service) awaitHeal(ctx context.Context, sandboxID string) {
	s.mu.Lock()
	h := s.healing[sandboxID]
	s.mu.Unlock()
	if h == nil {
		return
	}
	t := time.NewTimer(healAwait)
	defer t.Stop()
	select {
	case <-h.done:
	case <-ctx.Done():
	case <-t.C:
	}
}
