package memstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/storetest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) workspace.Store { return memstore.New() })
}

// fakeClock is a settable clock for WithClock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestClaimExpiresOnClock(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	s := memstore.New(memstore.WithClock(clock.now))
	ctx := t.Context()
	if _, ok, _ := s.Claim(ctx, "k", "a", time.Minute); !ok {
		t.Fatal("first claim lost")
	}
	clock.t = clock.t.Add(time.Minute - time.Nanosecond)
	if cur, ok, _ := s.Claim(ctx, "k", "b", time.Minute); ok || cur != "a" {
		t.Fatalf("claim before expiry = %q, %v", cur, ok)
	}
	clock.t = clock.t.Add(time.Nanosecond)
	if cur, ok, _ := s.Claim(ctx, "k", "b", time.Minute); !ok || cur != "b" {
		t.Fatalf("claim at expiry = %q, %v", cur, ok)
	}
}

func TestAllowFixedWindow(t *testing.T) {
	clock := &fakeClock{t: time.Unix(3600, 0)} // a window edge
	s := memstore.New(memstore.WithClock(clock.now))
	ctx := t.Context()
	allow := func() bool {
		ok, err := s.Allow(ctx, "k", 2, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	for i, want := range []bool{true, true, false, false} {
		if got := allow(); got != want {
			t.Fatalf("event %d: %v, want %v", i, got, want)
		}
	}
	clock.t = clock.t.Add(59 * time.Second)
	if allow() {
		t.Fatal("allowed late in a full window")
	}
	clock.t = clock.t.Add(time.Second) // the next window starts
	if !allow() {
		t.Fatal("refused in a new window")
	}
}

func TestAuditRing(t *testing.T) {
	for _, size := range []int{1, 3, memstore.DefaultAuditSize} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			opts := []memstore.Option{}
			if size != memstore.DefaultAuditSize {
				opts = append(opts, memstore.WithAuditSize(size))
			}
			s := memstore.New(opts...)
			ctx := t.Context()
			total := size + 5
			for i := range total {
				if err := s.Audit(ctx, workspace.AuditRecord{Tool: fmt.Sprint(i)}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := s.RecentAudit(ctx, total)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != size {
				t.Fatalf("kept %d records, want %d", len(got), size)
			}
			for i, r := range got {
				if want := fmt.Sprint(total - 1 - i); r.Tool != want {
					t.Fatalf("record %d is %s, want %s", i, r.Tool, want)
				}
			}
		})
	}
}

func TestSweepKeepsLiveClaims(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	s := memstore.New(memstore.WithClock(clock.now))
	ctx := t.Context()
	if _, ok, _ := s.Claim(ctx, "live", "v", 0); !ok {
		t.Fatal("claim lost")
	}
	for i := range 5000 { // enough to trigger sweeps
		if _, _, err := s.Claim(ctx, fmt.Sprint("tmp", i), "v", time.Second); err != nil {
			t.Fatal(err)
		}
		clock.t = clock.t.Add(time.Second)
	}
	if cur, ok, _ := s.Claim(ctx, "live", "w", 0); ok || cur != "v" {
		t.Fatalf("live claim swept: %q, %v", cur, ok)
	}
}
