package server

import (
	"testing"
	"time"
)

// TestIdleRelease: memory is given back once the last call of a burst has ended, never
// while a call runs, and not when a call started since the timer was set.
func TestIdleRelease(t *testing.T) {
	released := 0
	r := newIdleRelease(time.Hour) // the test fires the timer itself
	r.release = func() { released++ }

	a := r.busy()
	b := r.busy()
	a()
	r.fire()
	if released != 0 {
		t.Fatal("released while a call runs")
	}
	b()
	c := r.busy()
	r.fire()
	if released != 0 {
		t.Fatal("released although a call started after the burst ended")
	}
	c()
	r.fire()
	if released != 1 {
		t.Fatalf("released %d times after the burst, want 1", released)
	}

	t.Run("the timer fires", func(t *testing.T) {
		r := newIdleRelease(time.Millisecond)
		fired := make(chan struct{}, 1)
		r.release = func() { fired <- struct{}{} }
		r.busy()()
		select {
		case <-fired:
		case <-time.After(10 * time.Second):
			t.Fatal("memory was never released after the last call")
		}
	})
	t.Run("negative never releases", func(t *testing.T) {
		r := newIdleRelease(-1)
		r.release = func() { t.Fatal("released") }
		r.busy()()
		if r.timer != nil {
			t.Fatal("a timer was set")
		}
	})
}
