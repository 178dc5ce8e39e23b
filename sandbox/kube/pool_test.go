package kube

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRefillHold: the refill that taking a pooled pod wakes waits refillHold from the
// take (the bound sandbox's wake runs first), not at all before any take, and gives up
// with its context.
func TestRefillHold(t *testing.T) {
	var r refillTimer
	now := time.Now()
	if w := r.wait(now); w != 0 {
		t.Errorf("no take yet: the refill waits %s, want 0", w)
	}
	if err := r.hold(t.Context()); err != nil {
		t.Errorf("no take yet: hold = %v, want nil at once", err)
	}
	r.took(now)
	for _, c := range []struct {
		after, want time.Duration
	}{
		{0, refillHold},
		{refillHold / 4, refillHold * 3 / 4},
		{refillHold, 0},
		{2 * refillHold, 0},
	} {
		if w := r.wait(now.Add(c.after)); w != c.want {
			t.Errorf("%s after the take: the refill waits %s, want %s", c.after, w, c.want)
		}
	}
	r.took(time.Now())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := r.hold(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("hold with its context ended = %v, want context.Canceled", err)
	}
}
