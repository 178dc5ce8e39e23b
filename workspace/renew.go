package workspace

import (
	"context"
	"errors"
	"sync"
	"time"
)

// DefaultRenewFlush is how often batched idle-TTL renewals are written when
// Config.RenewFlush is zero.
const DefaultRenewFlush = time.Second

// renewals batches the idle-TTL renewals of successful calls: a call marks its session
// used, and a background loop writes the marks every flush interval, so that no call
// waits for a store write. The rules:
//   - a session's renewal is written when its last written one is at least a tenth of
//     its idle TTL old, as before batching: idle expiry counts from the last written
//     renewal, which may be up to a tenth of the TTL older than the last call. The
//     renewal written is the call's own time, so batching delays the write by at most
//     one flush interval but never moves the expiry;
//   - a call made when the session's idle deadline in the store is nearer than two
//     flush intervals writes its renewal at once, before it returns, so that a session
//     in use never expires for idleness while its renewal waits in a batch;
//   - a failed write is retried at the next flush; Close writes what is pending.
type renewals struct {
	every time.Duration
	mu    sync.Mutex
	marks map[string]renewal // by cacheKey
	stop  chan struct{}
	done  chan struct{}
}

type renewal struct {
	tenant, id string
	at         time.Time
}

func newRenewals(every time.Duration) *renewals {
	if every <= 0 {
		every = DefaultRenewFlush
	}
	return &renewals{every: every, marks: map[string]renewal{}, stop: make(chan struct{}), done: make(chan struct{})}
}

// renew renews sess's idle TTL after a call that succeeded. A failed call never
// renews: a broken session is reaped.
func (s *Service) renew(ctx context.Context, sess *Session) {
	if sess.IdleTTL <= 0 {
		return
	}
	now := s.cfg.Now()
	// Idle suspend goes by the store's LastUsed too: it must lag by a tenth of the
	// suspend delay at most.
	every := sess.IdleTTL / 10
	if tp, ok := s.cfg.Tenants.Policy(sess.Tenant); ok {
		if d := s.suspendAfter(sess.ID, tp.SuspendAfter.Std()); d > 0 {
			every = min(every, d/10)
		}
	}
	if now.Sub(sess.LastUsed) < every {
		return // the last written renewal is recent enough
	}
	if sess.IdleUntil().Sub(now) < 2*s.renewals.every {
		if err := s.cfg.Store.TouchSession(ctx, sess.Tenant, sess.ID, now); err != nil {
			s.log.Warn("renew session", "session", sess.ID, "err", err)
			return
		}
		sess.LastUsed = now
		return
	}
	r := s.renewals
	r.mu.Lock()
	r.marks[cacheKey(sess.Tenant, sess.ID)] = renewal{tenant: sess.Tenant, id: sess.ID, at: now}
	r.mu.Unlock()
}

// renewLoop flushes the renewals every interval until Close.
func (s *Service) renewLoop() {
	r := s.renewals
	defer close(r.done)
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.flushRenewals(context.Background())
		case <-r.stop:
			s.flushRenewals(context.Background())
			return
		}
	}
}

// flushParallel is how many renewals a flush writes at once.
const flushParallel = 16

// flushRenewals writes the pending renewals, flushParallel at a time; a write that
// fails stays pending unless a newer mark replaced it or the session is gone.
func (s *Service) flushRenewals(ctx context.Context) {
	r := s.renewals
	r.mu.Lock()
	marks := r.marks
	r.marks = map[string]renewal{}
	r.mu.Unlock()
	var wg sync.WaitGroup
	slots := make(chan struct{}, flushParallel)
	for key, m := range marks {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			err := s.cfg.Store.TouchSession(ctx, m.tenant, m.id, m.at)
			if err == nil || errors.Is(err, ErrNotFound) {
				return
			}
			s.log.Warn("renew session", "session", m.id, "err", err)
			r.mu.Lock()
			if _, newer := r.marks[key]; !newer {
				r.marks[key] = m
			}
			r.mu.Unlock()
		})
	}
	wg.Wait()
}

// pending reports whether a renewal of the session waits to be written.
func (r *renewals) pending(tenant, id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.marks[cacheKey(tenant, id)]
	return ok
}

// forget drops a deleted session's pending renewal.
func (r *renewals) forget(tenant, id string) {
	r.mu.Lock()
	delete(r.marks, cacheKey(tenant, id))
	r.mu.Unlock()
}
