package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/redisstore"
	"github.com/cwsdev/cws/workspace/storetest"
)

var prefixes atomic.Int64

// newStore returns a Store on url with a key prefix of its own, so tests can share a
// server (including one given by CWS_TEST_REDIS_URL) without seeing each other's keys.
func newStore(t *testing.T, url string) (*redisstore.Store, redis.UniversalClient, string) {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opt)
	prefix := fmt.Sprintf("cwstest:%d:%d:", time.Now().UnixNano(), prefixes.Add(1))
	s := redisstore.New(client, redisstore.Options{Prefix: prefix})
	t.Cleanup(func() {
		ctx := context.WithoutCancel(t.Context())
		for it := client.Scan(ctx, 0, prefix+"*", 1000).Iterator(); it.Next(ctx); {
			client.Del(ctx, it.Val())
		}
		s.Close()
	})
	return s, client, prefix
}

func TestContract(t *testing.T) {
	url := testenv.Redis(t)
	storetest.Run(t, func(t *testing.T) workspace.Store {
		s, _, _ := newStore(t, url)
		return s
	})
}

// TestKeySchema holds the store to the schema documented in doc.go.
func TestKeySchema(t *testing.T) {
	s, rdb, p := newStore(t, testenv.Redis(t))
	ctx := t.Context()
	created := time.UnixMicro(1_700_000_000_123_456)
	sess := &workspace.Session{ID: "s1", Tenant: "acme", CreatedAt: created, IdleTTL: time.Hour}
	if err := s.CreateSession(ctx, sess, 5); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.TTL(ctx, p+"session:acme:s1").Val(); ttl != -1 {
		t.Errorf("session key TTL = %v, want none (-1)", ttl)
	}
	if score, err := rdb.ZScore(ctx, p+"tenant:acme:sessions", "s1").Result(); err != nil || int64(score) != created.UnixMicro() {
		t.Errorf("tenant index score = %v, %v; want %d", score, err, created.UnixMicro())
	}
	if !rdb.SIsMember(ctx, p+"sessions", "acme/s1").Val() {
		t.Error("acme/s1 missing from the all-sessions set")
	}

	if _, _, err := s.Claim(ctx, "idem:k", "v", time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, p+"claim:idem:k").Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("claim TTL = %v, want (0, 1m]", ttl)
	}
	if _, err := s.Allow(ctx, "rl", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if keys := rdb.Keys(ctx, p+"rate:rl:*").Val(); len(keys) != 1 || rdb.PTTL(ctx, keys[0]).Val() <= 0 {
		t.Errorf("rate keys %v, want one with a TTL", keys)
	}
	if err := s.Audit(ctx, workspace.AuditRecord{Tool: "readFile"}); err != nil {
		t.Fatal(err)
	}
	if n := rdb.XLen(ctx, p+"audit").Val(); n != 1 {
		t.Errorf("audit stream has %d entries, want 1", n)
	}

	if err := s.DeleteSession(ctx, "acme", "s1"); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{p + "session:acme:s1", p + "tenant:acme:sessions", p + "sessions"} {
		if n := rdb.Exists(ctx, key).Val(); n != 0 {
			t.Errorf("%s still exists after delete", key)
		}
	}
}

func TestAuditCapped(t *testing.T) {
	url := testenv.Redis(t)
	opt, _ := redis.ParseURL(url)
	rdb := redis.NewClient(opt)
	p := fmt.Sprintf("cwstest:%d:cap:", time.Now().UnixNano())
	s := redisstore.New(rdb, redisstore.Options{Prefix: p, AuditMaxLen: 10})
	t.Cleanup(func() { rdb.Del(context.WithoutCancel(t.Context()), p+"audit"); s.Close() })
	ctx := t.Context()
	for i := range 1000 {
		if err := s.Audit(ctx, workspace.AuditRecord{Tool: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// MAXLEN ~ trims whole macro nodes (100 entries by default), so allow slack.
	if n := rdb.XLen(ctx, p+"audit").Val(); n > 200 {
		t.Errorf("audit stream has %d entries with AuditMaxLen 10", n)
	}
	recent, err := s.RecentAudit(ctx, 1)
	if err != nil || len(recent) != 1 || recent[0].Tool != "999" {
		t.Errorf("RecentAudit(1) = %v, %v; want tool 999", recent, err)
	}
}

// TestUnavailable: a Redis that doesn't answer is workspace.ErrUnavailable.
func TestUnavailable(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	s := redisstore.New(rdb, redisstore.Options{})
	defer s.Close()
	ctx := t.Context()
	checks := map[string]error{
		"ping":   s.Ping(ctx),
		"create": s.CreateSession(ctx, &workspace.Session{ID: "s", Tenant: "t"}, 1),
		"touch":  s.TouchSession(ctx, "t", "s", time.Now()),
		"audit":  s.Audit(ctx, workspace.AuditRecord{}),
	}
	_, checks["get"] = s.GetSession(ctx, "t", "s")
	_, checks["all"] = s.AllSessions(ctx)
	_, _, checks["claim"] = s.Claim(ctx, "k", "v", 0)
	_, checks["allow"] = s.Allow(ctx, "k", 1, time.Second)
	for op, err := range checks {
		if !errors.Is(err, workspace.ErrUnavailable) {
			t.Errorf("%s: err = %v, want ErrUnavailable", op, err)
		}
	}

	if _, err := redisstore.Open(ctx, "redis://127.0.0.1:1/0?dial_timeout=1s&max_retries=-1"); !errors.Is(err, workspace.ErrUnavailable) {
		t.Errorf("Open of a closed port: %v, want ErrUnavailable", err)
	}
	if _, err := redisstore.Open(ctx, "http://nope"); err == nil || errors.Is(err, workspace.ErrUnavailable) {
		t.Errorf("Open of a bad URL: %v, want a URL error", err)
	}
}

func TestOpen(t *testing.T) {
	s, err := redisstore.Open(t.Context(), testenv.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestCallerCancel: the caller's own cancellation is not reported as an outage.
func TestCallerCancel(t *testing.T) {
	s, _, _ := newStore(t, testenv.Redis(t))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.GetSession(ctx, "acme", "s1")
	if !errors.Is(err, context.Canceled) || errors.Is(err, workspace.ErrUnavailable) {
		t.Fatalf("cancelled get: %v, want context.Canceled only", err)
	}
}

// TestAuditBatch: a batch lands in order, as single appends would.
func TestAuditBatch(t *testing.T) {
	s, _, _ := newStore(t, testenv.Redis(t))
	ctx := t.Context()
	var batch []workspace.AuditRecord
	for i := range 5 {
		batch = append(batch, workspace.AuditRecord{Tool: fmt.Sprint("tool", i), Outcome: "ok"})
	}
	if err := s.AuditBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	recent, err := s.RecentAudit(ctx, 10)
	if err != nil || len(recent) != 5 {
		t.Fatalf("RecentAudit = %v, %v; want 5 records", recent, err)
	}
	for i, r := range recent {
		if want := fmt.Sprint("tool", 4-i); r.Tool != want {
			t.Errorf("record %d is %s, want %s (newest first)", i, r.Tool, want)
		}
	}
}
