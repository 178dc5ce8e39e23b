package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cwsdev/cws/workspace"
)

func claim(t *testing.T, s workspace.Store, key, value string, ttl time.Duration, wantCur string, wantClaimed bool) {
	t.Helper()
	cur, ok, err := s.Claim(t.Context(), key, value, ttl)
	must(t, "claim "+key, err)
	if cur != wantCur || ok != wantClaimed {
		t.Fatalf("Claim(%q, %q) = %q, %v; want %q, %v", key, value, cur, ok, wantCur, wantClaimed)
	}
}

func testClaimRelease(t *testing.T, s workspace.Store) {
	ctx := t.Context()
	claim(t, s, "idem:acme:k1", "s1", 0, "s1", true)
	claim(t, s, "idem:acme:k1", "s2", 0, "s1", false)
	claim(t, s, "idem:acme:k1", "s1", 0, "s1", true) // the holder's own claim: renewed, still its
	claim(t, s, "idem:acme:k2", "s2", time.Hour, "s2", true)

	must(t, "release with another value", s.Release(ctx, "idem:acme:k1", "s2"))
	claim(t, s, "idem:acme:k1", "s3", 0, "s1", false)
	must(t, "release", s.Release(ctx, "idem:acme:k1", "s1"))
	claim(t, s, "idem:acme:k1", "s3", 0, "s3", true)
	must(t, "release missing", s.Release(ctx, "idem:acme:none", "x"))
	claim(t, s, "idem:acme:k2", "s9", 0, "s2", false)
}

func testClaimConcurrent(t *testing.T, s workspace.Store) {
	const n = 50
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []string
		seen    = map[string]int{}
	)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			v := fmt.Sprint("v", i)
			cur, ok, err := s.Claim(t.Context(), "default:acme:agent", v, time.Minute)
			if err != nil {
				t.Errorf("claim %d: %v", i, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			seen[cur]++
			if ok {
				winners = append(winners, v)
				if cur != v {
					t.Errorf("claim %d won but reports %q in force", i, cur)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("%d concurrent claims: winners %v, want exactly one", n, winners)
	}
	if len(seen) != 1 || seen[winners[0]] != n {
		t.Fatalf("claims saw values %v in force, want only %q", seen, winners[0])
	}
}

func testClaimTTL(t *testing.T, s workspace.Store) {
	claim(t, s, "ttl", "first", 300*time.Millisecond, "first", true)
	claim(t, s, "forever", "first", 0, "first", true)
	claim(t, s, "ttl", "second", time.Minute, "first", false)
	time.Sleep(700 * time.Millisecond)
	claim(t, s, "ttl", "second", time.Minute, "second", true) // the first claim expired
	claim(t, s, "forever", "second", 0, "first", false)       // ttl 0 never expires

	// A holder renews its claim by claiming it again: it outlives its first TTL.
	claim(t, s, "renewed", "holder", 400*time.Millisecond, "holder", true)
	for range 3 {
		time.Sleep(200 * time.Millisecond)
		claim(t, s, "renewed", "holder", 400*time.Millisecond, "holder", true)
	}
	claim(t, s, "renewed", "other", time.Minute, "holder", false)
}

// allowN calls Allow n times and returns how many were allowed. Windows are aligned to
// the Unix epoch, so if a window edge passed meanwhile it tries again with a new key.
func allowN(t *testing.T, s workspace.Store, key string, n, limit int, win time.Duration) int {
	t.Helper()
	ms := win.Milliseconds()
	for attempt := 0; ; attempt++ {
		k := fmt.Sprintf("%s#%d", key, attempt)
		before := time.Now().UnixMilli() / ms
		allowed := 0
		for range n {
			ok, err := s.Allow(t.Context(), k, limit, win)
			must(t, "allow", err)
			if ok {
				allowed++
			}
		}
		if time.Now().UnixMilli()/ms == before || attempt == 10 {
			return allowed
		}
	}
}

func testAllowCounts(t *testing.T, s workspace.Store) {
	if got := allowN(t, s, "rate:acme", 10, 3, time.Hour); got != 3 {
		t.Errorf("10 events, limit 3: %d allowed, want 3", got)
	}
	if got := allowN(t, s, "rate:globex", 3, 3, time.Hour); got != 3 {
		t.Errorf("a second key: %d of 3 allowed, want 3 (keys are independent)", got)
	}
	if got := allowN(t, s, "rate:unlimited", 5, 0, time.Hour); got != 5 {
		t.Errorf("limit 0: %d of 5 allowed, want all", got)
	}
}

func testAllowWindowEnds(t *testing.T, s workspace.Store) {
	ctx := t.Context()
	const win = 500 * time.Millisecond
	if got := allowN(t, s, "rate:window", 3, 2, win); got != 2 {
		t.Fatalf("3 events, limit 2: %d allowed, want 2", got)
	}
	// Any window-long pause starts a new window.
	ok, err := s.Allow(ctx, "rate:window2", 1, win)
	must(t, "allow", err)
	if !ok {
		t.Fatal("first event refused")
	}
	time.Sleep(win + 100*time.Millisecond)
	ok, err = s.Allow(ctx, "rate:window2", 1, win)
	must(t, "allow in the next window", err)
	if !ok {
		t.Fatal("event in a later window refused")
	}
}

func testAudit(t *testing.T, s workspace.Store) {
	ctx := t.Context()
	recent, err := s.RecentAudit(ctx, 10)
	must(t, "recent on empty", err)
	if len(recent) != 0 {
		t.Fatalf("new store has audit records %v", recent)
	}
	var want []workspace.AuditRecord
	for i := range 5 {
		r := workspace.AuditRecord{
			Time: base.Add(time.Duration(i) * time.Millisecond), Tenant: "acme", Subject: "agent",
			Session: "s1", Tool: fmt.Sprint("tool", i), Decision: "allow", Outcome: "ok",
			Duration: 0.000123 * float64(i+1),
		}
		if i == 3 {
			r.Decision, r.Outcome, r.Rule = "deny", "denied", "deniedPaths"
		}
		must(t, "audit", s.Audit(ctx, r))
		want = append(want, r)
	}
	recent, err = s.RecentAudit(ctx, 3)
	must(t, "recent 3", err)
	checkAudit(t, recent, []workspace.AuditRecord{want[4], want[3], want[2]})
	recent, err = s.RecentAudit(ctx, 100)
	must(t, "recent 100", err)
	checkAudit(t, recent, []workspace.AuditRecord{want[4], want[3], want[2], want[1], want[0]})
	recent, err = s.RecentAudit(ctx, 0)
	must(t, "recent 0", err)
	if len(recent) != 0 {
		t.Errorf("RecentAudit(0) returned %d records", len(recent))
	}
}

func checkAudit(t *testing.T, got, want []workspace.AuditRecord) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d audit records, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if !g.Time.Equal(w.Time) {
			t.Errorf("record %d: Time %v, want %v", i, g.Time, w.Time)
		}
		g.Time = w.Time
		if g != w {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

func testPing(t *testing.T, s workspace.Store) {
	must(t, "ping", s.Ping(t.Context()))
}

func testState(t *testing.T, s workspace.Store) {
	ctx := t.Context()
	sess := &workspace.Session{ID: "st1", Tenant: "acme", CreatedAt: time.Now()}
	if _, err := s.GetState(ctx, "acme", "st1", "editor"); !errors.Is(err, workspace.ErrNotFound) {
		t.Fatalf("GetState of a missing session: %v, want ErrNotFound", err)
	}
	if err := s.PutState(ctx, "acme", "st1", "editor", []byte("x")); !errors.Is(err, workspace.ErrNotFound) {
		t.Fatalf("PutState of a missing session: %v, want ErrNotFound", err)
	}
	must(t, "create", s.CreateSession(ctx, sess, 0))
	v, err := s.GetState(ctx, "acme", "st1", "editor")
	must(t, "get unset", err)
	if v != nil {
		t.Fatalf("unset state = %q, want nil", v)
	}
	must(t, "put", s.PutState(ctx, "acme", "st1", "editor", []byte(`{"active":"a.go"}`)))
	must(t, "put other key", s.PutState(ctx, "acme", "st1", "breakpoints", []byte(`[]`)))
	if v, err := s.GetState(ctx, "acme", "st1", "editor"); err != nil || string(v) != `{"active":"a.go"}` {
		t.Fatalf("state = %q, %v", v, err)
	}
	if _, err := s.GetState(ctx, "globex", "st1", "editor"); !errors.Is(err, workspace.ErrNotFound) {
		t.Fatalf("another tenant's state: %v, want ErrNotFound", err)
	}
	must(t, "overwrite", s.PutState(ctx, "acme", "st1", "editor", []byte(`{}`)))
	if v, _ := s.GetState(ctx, "acme", "st1", "editor"); string(v) != `{}` {
		t.Fatalf("overwritten state = %q", v)
	}
	must(t, "delete key", s.PutState(ctx, "acme", "st1", "editor", nil))
	if v, _ := s.GetState(ctx, "acme", "st1", "editor"); v != nil {
		t.Fatalf("deleted state = %q", v)
	}
	must(t, "delete session", s.DeleteSession(ctx, "acme", "st1"))
	must(t, "recreate", s.CreateSession(ctx, sess, 0))
	if v, err := s.GetState(ctx, "acme", "st1", "breakpoints"); err != nil || v != nil {
		t.Fatalf("state after the session was deleted and recreated = %q, %v; want nil", v, err)
	}
}
