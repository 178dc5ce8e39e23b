package workspace_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/sandbox/sandboxtest"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/redisstore"
	"github.com/cwsdev/cws/workspace/toolset"
)

// countingStore counts session reads and touches. It embeds the store whole, so a
// redisstore keeps announcing and watching.
type countingRedis struct {
	*redisstore.Store
	reads, touches atomic.Int64
}

func (c *countingRedis) GetSession(ctx context.Context, tenant, id string) (*workspace.Session, error) {
	c.reads.Add(1)
	return c.Store.GetSession(ctx, tenant, id)
}

func (c *countingRedis) TouchSession(ctx context.Context, tenant, id string, at time.Time) error {
	c.touches.Add(1)
	return c.Store.TouchSession(ctx, tenant, id, at)
}

type countingMem struct {
	*memstore.Store
	reads, touches atomic.Int64
}

func (c *countingMem) GetSession(ctx context.Context, tenant, id string) (*workspace.Session, error) {
	c.reads.Add(1)
	return c.Store.GetSession(ctx, tenant, id)
}

func (c *countingMem) TouchSession(ctx context.Context, tenant, id string, at time.Time) error {
	c.touches.Add(1)
	return c.Store.TouchSession(ctx, tenant, id, at)
}

// testClock is a settable clock shared by replicas.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) Set(t time.Time)         { c.mu.Lock(); defer c.mu.Unlock(); c.now = t }
func (c *testClock) Advance(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

// replicas are two Services on one Redis (one key prefix) and one sandbox driver, as
// two cws replicas on one engine.
type replicas struct {
	a, b     *workspace.Service
	sa, sb   *countingRedis
	clock    *testClock
	local    *sandboxtest.Local
	caller   workspace.Caller
	idle     time.Duration
	lifetime time.Duration
}

func newReplicas(t *testing.T) *replicas {
	t.Helper()
	url := testenv.Redis(t)
	prefix := fmt.Sprintf("cwscache:%d:", time.Now().UnixNano())
	open := func() *countingRedis {
		opt, err := redis.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		return &countingRedis{Store: redisstore.New(redis.NewClient(opt), redisstore.Options{Prefix: prefix})}
	}
	tp, _ := policy.Parse([]byte(`{}`))
	r := &replicas{sa: open(), sb: open(), clock: &testClock{now: time.Now()}, local: sandboxtest.New(t),
		caller: workspace.Caller{Tenant: testTenant, Subject: "alice", Scopes: auth.AllScopes()},
		idle:   24 * time.Hour, lifetime: time.Hour}
	newSvc := func(st workspace.Store) *workspace.Service {
		svc := workspace.New(workspace.Config{Tools: toolset.All(), Store: st, Sandboxes: r.local, Tenants: tenants{testTenant: tp},
			DefaultImage: "test-image", Now: r.clock.Now, DefaultIdleTTL: r.idle, DefaultMaxLife: r.lifetime})
		t.Cleanup(svc.Close)
		return svc
	}
	r.a, r.b = newSvc(r.sa), newSvc(r.sb)
	t.Cleanup(func() { r.sa.Close(); r.sb.Close() })
	return r
}

func (r *replicas) create(t *testing.T) *workspace.Session {
	t.Helper()
	sess, err := r.a.CreateSession(t.Context(), r.caller, workspace.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

func (r *replicas) read(t *testing.T, svc *workspace.Service, id string) error {
	t.Helper()
	_, err := svc.Call(t.Context(), r.caller, id, "listFiles", []byte(`{"path":"."}`), workspace.CallOptions{})
	return err
}

// warm makes B's cache hold session id: the announcements of A's create (its record is
// written twice) reach B asynchronously and may drop what B's first call cached; once
// they are in, three calls on B are answered without a store read.
func (r *replicas) warm(t *testing.T, id string) {
	t.Helper()
	eventually(t, "three calls on B answered from its cache", func() bool {
		if err := r.read(t, r.b, id); err != nil {
			t.Fatal(err)
		}
		reads := r.sb.reads.Load()
		for range 3 {
			if err := r.read(t, r.b, id); err != nil {
				t.Fatal(err)
			}
		}
		return r.sb.reads.Load() == reads
	})
}

// eventually waits for cond, which an asynchronous announcement makes true.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

// TestSessionCacheAcrossReplicas: a call on replica B is answered from B's cache, and
// a delete on replica A is refused on B at once.
func TestSessionCacheAcrossReplicas(t *testing.T) {
	r := newReplicas(t)
	sess := r.create(t)
	r.warm(t, sess.ID)

	if err := r.a.DeleteSession(t.Context(), r.caller, sess.ID); err != nil {
		t.Fatal(err)
	}
	err := r.read(t, r.b, sess.ID)
	if !errors.Is(err, workspace.ErrNotFound) {
		t.Fatalf("call on B right after the delete on A: %v, want ErrNotFound", err)
	}

	// A change on A reaches B's cache by announcement, without a failed call.
	other := r.create(t)
	if err := r.read(t, r.b, other.ID); err != nil {
		t.Fatal(err)
	}
	before := r.sb.reads.Load()
	if _, err := r.a.RenewSession(t.Context(), r.caller, other.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "B reads the store again after A renewed the session", func() bool {
		_ = r.read(t, r.b, other.ID)
		return r.sb.reads.Load() > before
	})
}

// TestSessionCacheExpiry: a cached session is refused exactly at its deadline,
// without reading the store.
func TestSessionCacheExpiry(t *testing.T) {
	r := newReplicas(t)
	sess := r.create(t)
	r.warm(t, sess.ID)
	reads := r.sb.reads.Load()
	r.clock.Set(sess.ExpiresAt.Add(-time.Nanosecond))
	if err := r.read(t, r.b, sess.ID); err != nil {
		t.Fatalf("a nanosecond before the deadline: %v", err)
	}
	r.clock.Set(sess.ExpiresAt)
	if err := r.read(t, r.b, sess.ID); !errors.Is(err, workspace.ErrNotFound) {
		t.Fatalf("at the deadline: %v, want ErrNotFound", err)
	}
	if got := r.sb.reads.Load() - reads; got != 0 {
		t.Fatalf("B read the store %d times, want 0", got)
	}
}

// TestSessionWatchReconnect: a lost subscription is reported (live false, so caches
// empty themselves) and its return too.
func TestSessionWatchReconnect(t *testing.T) {
	url := testenv.Redis(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.ClientName = fmt.Sprintf("cws-watch-test-%d", time.Now().UnixNano())
	rdb := redis.NewClient(opt)
	st := redisstore.New(rdb, redisstore.Options{Prefix: fmt.Sprintf("cwswatch:%d:", time.Now().UnixNano())})
	defer st.Close()
	events := make(chan string, 100)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go st.WatchSessions(ctx, func(tenant, id string) { events <- "changed " + tenant + "/" + id },
		func(live bool) { events <- fmt.Sprint("live ", live) })
	next := func(want string) {
		t.Helper()
		for {
			select {
			case got := <-events:
				if got == want {
					return
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no %q", want)
			}
		}
	}
	next("live true")
	if err := st.DeleteSession(t.Context(), "acme", "s-x"); !errors.Is(err, workspace.ErrNotFound) {
		t.Fatal(err)
	}
	next("changed acme/s-x")
	// Kill this test's subscription alone (the server may be shared).
	opt.ClientName = ""
	admin := redis.NewClient(opt)
	defer admin.Close()
	list, err := admin.ClientList(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for line := range strings.SplitSeq(list, "\n") {
		if !strings.Contains(line, " name="+rdb.Options().ClientName+" ") || !strings.Contains(line, "sub=1") {
			continue
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
		if err := admin.Do(t.Context(), "CLIENT", "KILL", "ID", id).Err(); err != nil {
			t.Fatal(err)
		}
		killed++
	}
	if killed != 1 {
		t.Fatalf("killed %d subscriptions, want 1:\n%s", killed, list)
	}
	next("live false")
	next("live true")
}

// TestRenewalsBatched: a call marks its session used and the renewal is written in the
// background; near its idle deadline a call writes it at once; a session in use never
// expires for idleness.
func TestRenewalsBatched(t *testing.T) {
	clock := &testClock{now: time.Now()}
	st := &countingMem{Store: memstore.New()}
	tp, _ := policy.Parse([]byte(`{}`))
	const idle = time.Hour
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Store: st, Sandboxes: sandboxtest.New(t), Tenants: tenants{testTenant: tp},
		DefaultImage: "test-image", Now: clock.Now, DefaultIdleTTL: idle, RenewFlush: 10 * time.Minute})
	caller := workspace.Caller{Tenant: testTenant, Subject: "alice", Scopes: auth.AllScopes()}
	sess, err := svc.CreateSession(t.Context(), caller, workspace.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	call := func() {
		t.Helper()
		if _, err := svc.Call(t.Context(), caller, sess.ID, "listFiles", []byte(`{"path":"."}`), workspace.CallOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	stored := func() time.Time {
		t.Helper()
		s, err := st.Store.GetSession(t.Context(), testTenant, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		return s.LastUsed
	}

	// Within a tenth of the TTL of the last renewal: nothing to write.
	clock.Advance(idle / 20)
	call()
	workspace.FlushRenewals(svc)
	if got := st.touches.Load(); got != 0 {
		t.Fatalf("touches = %d, want 0", got)
	}

	// Later: marked by the call, written by the flush.
	clock.Advance(idle / 5)
	used := clock.Now()
	call()
	if got := st.touches.Load(); got != 0 {
		t.Fatalf("the call wrote its renewal itself (%d touches)", got)
	}
	workspace.FlushRenewals(svc)
	if got := stored(); !got.Equal(used) {
		t.Fatalf("after the flush lastUsed = %v, want the call's time %v", got, used)
	}

	// Near the idle deadline (within two flush intervals, 20 min) the call writes at once.
	clock.Set(used.Add(idle - time.Second))
	used = clock.Now()
	call()
	if got := stored(); !got.Equal(used) {
		t.Fatalf("near the deadline lastUsed = %v, want %v written by the call", got, used)
	}

	// In use every 0.9 TTL, with no flush at all, it never expires.
	for range 5 {
		clock.Advance(idle * 9 / 10)
		call()
	}

	// Close writes what is pending.
	clock.Advance(idle / 5)
	used = clock.Now()
	call()
	svc.Close()
	if got := stored(); !got.Equal(used) {
		t.Fatalf("after Close lastUsed = %v, want %v", got, used)
	}
}

// failingTouches fails TouchSession while down is set.
type failingTouches struct {
	*memstore.Store
	down atomic.Bool
}

func (f *failingTouches) TouchSession(ctx context.Context, tenant, id string, at time.Time) error {
	if f.down.Load() {
		return fmt.Errorf("%w: store down", workspace.ErrUnavailable)
	}
	return f.Store.TouchSession(ctx, tenant, id, at)
}

// TestRenewalRetried: a renewal whose write failed is written by the next flush.
func TestRenewalRetried(t *testing.T) {
	clock := &testClock{now: time.Now()}
	st := &failingTouches{Store: memstore.New()}
	tp, _ := policy.Parse([]byte(`{}`))
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Store: st, Sandboxes: sandboxtest.New(t), Tenants: tenants{testTenant: tp},
		DefaultImage: "test-image", Now: clock.Now, DefaultIdleTTL: time.Hour, RenewFlush: time.Minute})
	defer svc.Close()
	caller := workspace.Caller{Tenant: testTenant, Subject: "alice", Scopes: auth.AllScopes()}
	sess, err := svc.CreateSession(t.Context(), caller, workspace.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Minute)
	used := clock.Now()
	if _, err := svc.Call(t.Context(), caller, sess.ID, "listFiles", []byte(`{"path":"."}`), workspace.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	st.down.Store(true)
	workspace.FlushRenewals(svc)
	st.down.Store(false)
	workspace.FlushRenewals(svc)
	got, err := st.Store.GetSession(t.Context(), testTenant, sess.ID)
	if err != nil || !got.LastUsed.Equal(used) {
		t.Fatalf("lastUsed = %v (%v), want %v", got.LastUsed, err, used)
	}
}

// TestSessionCacheOwnWrites: on one node (memstore, no announcements), the Service's
// own writes reach its cache: a cached session deleted answers not found.
func TestSessionCacheOwnWrites(t *testing.T) {
	e := newTestEnv(t, "")
	read := func() error {
		_, err := e.svc.Call(t.Context(), e.caller, e.id, "listFiles", []byte(`{"path":"."}`), workspace.CallOptions{})
		return err
	}
	if err := read(); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.DeleteSession(t.Context(), e.caller, e.id); err != nil {
		t.Fatal(err)
	}
	if err := read(); !errors.Is(err, workspace.ErrNotFound) {
		t.Fatalf("after delete: %v, want ErrNotFound", err)
	}
}

// TestSessionForFromCache: the bound endpoint's lookup (/v1/sessions/{id}/mcp) is
// answered from the cache like a call, refuses an expired session without a store
// read, never answers for another tenant, and says not found once a delete on another
// replica is announced.
func TestSessionForFromCache(t *testing.T) {
	r := newReplicas(t)
	sess := r.create(t)
	r.warm(t, sess.ID)
	reads := r.sb.reads.Load()
	for range 3 {
		got, err := r.b.SessionFor(t.Context(), r.caller, sess.ID)
		if err != nil || got.ID != sess.ID {
			t.Fatalf("SessionFor: %v, %v", got, err)
		}
	}
	if n := r.sb.reads.Load() - reads; n != 0 {
		t.Fatalf("SessionFor read the store %d times, want 0 (cached)", n)
	}
	other := workspace.Caller{Tenant: "someone-else", Subject: "alice", Scopes: auth.AllScopes()}
	if _, err := r.b.SessionFor(t.Context(), other, sess.ID); !errors.Is(err, workspace.ErrNotFound) {
		t.Fatalf("SessionFor of another tenant: %v, want ErrNotFound", err)
	}
	now := r.clock.Now()
	r.clock.Set(sess.ExpiresAt)
	reads = r.sb.reads.Load()
	if _, err := r.b.SessionFor(t.Context(), r.caller, sess.ID); !errors.Is(err, workspace.ErrNotFound) {
		t.Fatalf("SessionFor at the deadline: %v, want ErrNotFound", err)
	}
	if n := r.sb.reads.Load() - reads; n != 0 {
		t.Fatalf("SessionFor of an expired cached session read the store %d times, want 0", n)
	}
	r.clock.Set(now)
	if err := r.a.DeleteSession(t.Context(), r.caller, sess.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "SessionFor on B says not found after the delete on A", func() bool {
		_, err := r.b.SessionFor(t.Context(), r.caller, sess.ID)
		return errors.Is(err, workspace.ErrNotFound)
	})
}
