package storetest

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cwsdev/cws/workspace"
)

// base is a fixed instant with nanoseconds, in a non-UTC zone, to prove precision.
var base = time.Date(2026, 3, 14, 15, 9, 26, 535897932, time.FixedZone("X", 5*3600+1800))

func session(tenant, id string, created time.Time) *workspace.Session {
	return &workspace.Session{
		ID:        id,
		Tenant:    tenant,
		Subject:   "agent-" + id,
		Image:     "cws-workspace:test",
		Sandbox:   "c0ffee" + id,
		State:     workspace.StateReady,
		Labels:    map[string]string{"job": id, "team": "core"},
		CreatedAt: created,
		LastUsed:  created.Add(1500 * time.Millisecond),
		IdleTTL:   30*24*time.Hour + 1, // large and odd: survives no float rounding
		ExpiresAt: created.Add(72 * time.Hour),
	}
}

// equal compares sessions field by field; times with Equal, nil and empty labels alike.
func equal(t *testing.T, got, want *workspace.Session) {
	t.Helper()
	if got == nil {
		t.Fatalf("got nil session, want %+v", want)
	}
	g, w := *got, *want
	for _, p := range []struct {
		name     string
		got, wnt time.Time
	}{{"CreatedAt", g.CreatedAt, w.CreatedAt}, {"LastUsed", g.LastUsed, w.LastUsed}, {"ExpiresAt", g.ExpiresAt, w.ExpiresAt}} {
		if !p.got.Equal(p.wnt) {
			t.Errorf("session %s: %s = %v, want %v", w.ID, p.name, p.got, p.wnt)
		}
	}
	if !maps.Equal(g.Labels, w.Labels) {
		t.Errorf("session %s: Labels = %v, want %v", w.ID, g.Labels, w.Labels)
	}
	g.CreatedAt, g.LastUsed, g.ExpiresAt = w.CreatedAt, w.LastUsed, w.ExpiresAt
	g.Labels, w.Labels = nil, nil
	if !reflect.DeepEqual(g, w) {
		t.Errorf("session %s:\n got %+v\nwant %+v", w.ID, *got, *want)
	}
}

func isErr(t *testing.T, op string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", op, err, want)
	}
}

func must(t *testing.T, op string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
}

func testRoundTrip(t *testing.T, s workspace.Store) {
	ctx := t.Context()
	want := session("acme", "s1", base)
	must(t, "create", s.CreateSession(ctx, want, 0))
	got, err := s.GetSession(ctx, "acme", "s1")
	must(t, "get", err)
	equal(t, got, want)

	// Zero times and no labels survive as zero and empty.
	bare := &workspace.Session{ID: "s2", Tenant: "acme", State: workspace.StateCreating, CreatedAt: base}
	must(t, "create bare", s.CreateSession(ctx, bare, 0))
	got, err = s.GetSession(ctx, "acme", "s2")
	must(t, "get bare", err)
	equal(t, got, bare)
	if !got.ExpiresAt.IsZero() || !got.LastUsed.IsZero() {
		t.Errorf("zero times came back as %v, %v", got.LastUsed, got.ExpiresAt)
	}

	// A wall-clock time from time.Now (monotonic reading, local zone) too.
	now := session("acme", "s3", time.Now())
	must(t, "create now", s.CreateSession(ctx, now, 0))
	got, err = s.GetSession(ctx, "acme", "s3")
	must(t, "get now", err)
	equal(t, got, now)
}

func testCopies(t *testing.T, s workspace.Store) {
	ctx := t.Context()
	in := session("acme", "s1", base)
	want := session("acme", "s1", base)
	must(t, "create", s.CreateSession(ctx, in, 0))
	in.State, in.Labels["job"] = workspace.StateFailed, "changed"

	got, err := s.GetSession(ctx, "acme", "s1")
	must(t, "get", err)
	equal(t, got, want)
	got.State, got.Labels["job"] = workspace.StateFailed, "changed"

	list, err := s.ListSessions(ctx, "acme")
	must(t, "list", err)
	if len(list) != 1 {
		t.Fatalf("list has %d sessions, want 1", len(list))
	}
	equal(t, list[0], want)
}

func testUpdate(t *testing.T, s workspace.Store) {
	ctx := t.Context()
	sess := session("acme", "s1", base)
	must(t, "create", s.CreateSession(ctx, sess, 0))
	sess.State = workspace.StateFailed
	sess.Sandbox = "other"
	sess.Labels = nil
	sess.ExpiresAt = base.Add(time.Hour + time.Nanosecond)
	must(t, "update", s.UpdateSession(ctx, sess))
	got, err := s.GetSession(ctx, "acme", "s1")
	must(t, "get", err)
	equal(t, got, sess)

	isErr(t, "update missing", s.UpdateSession(ctx, session("acme", "nope", base)), workspace.ErrNotFound)
	if _, err := s.GetSession(ctx, "acme", "nope"); !errors.Is(err, workspace.ErrNotFound) {
		t.Fatalf("update of a missing session created it (get: %v)", err)
	}
}

func testTouch(t *testing.T, s workspace.Store) {
	ctx := t.Context()
	sess := session("acme", "s1", base)
	must(t, "create", s.CreateSession(ctx, sess, 0))
	at := base.Add(42*time.Minute + 7*time.Nanosecond)
	must(t, "touch", s.TouchSession(ctx, "acme", "s1", at))
	got, err := s.GetSession(ctx, "acme", "s1")
	must(t, "get", err)
	sess.LastUsed = at
	equal(t, got, sess)
	if !got.IdleUntil().Equal(at.Add(sess.IdleTTL)) {
		t.Errorf("IdleUntil = %v, want %v", got.IdleUntil(), at.Add(sess.IdleTTL))
	}
	isErr(t, "touch missing", s.TouchSession(ctx, "acme", "nope", at), workspace.ErrNotFound)

	// Concurrent touches all land on the same session without losing it or its fields.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if err := s.TouchSession(ctx, "acme", "s1", at.Add(time.Duration(i)*time.Second)); err != nil {
				t.Errorf("touch %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	got, err = s.GetSession(ctx, "acme", "s1")
	must(t, "get after touches", err)
	got.LastUsed = sess.LastUsed
	equal(t, got, sess)
}

func testDelete(t *testing.T, s workspace.Store) {
	ctx := t.Context()
	must(t, "create", s.CreateSession(ctx, session("acme", "s1", base), 0))
	must(t, "create", s.CreateSession(ctx, session("acme", "s2", base.Add(time.Second)), 0))
	must(t, "delete", s.DeleteSession(ctx, "acme", "s1"))
	_, err := s.GetSession(ctx, "acme", "s1")
	isErr(t, "get deleted", err, workspace.ErrNotFound)
	isErr(t, "delete again", s.DeleteSession(ctx, "acme", "s1"), workspace.ErrNotFound)
	isErr(t, "touch deleted", s.TouchSession(ctx, "acme", "s1", base), workspace.ErrNotFound)
	list, err := s.ListSessions(ctx, "acme")
	must(t, "list", err)
	if ids := ids(list); !slices.Equal(ids, []string{"s2"}) {
		t.Errorf("list after delete = %v, want [s2]", ids)
	}
	all, err := s.AllSessions(ctx)
	must(t, "all", err)
	if ids := ids(all); !slices.Equal(ids, []string{"s2"}) {
		t.Errorf("all after delete = %v, want [s2]", ids)
	}
	// The id can be used again.
	must(t, "create again", s.CreateSession(ctx, session("acme", "s1", base), 0))
}

func testListOrder(t *testing.T, s workspace.Store) {
	ctx := t.Context()
	// Created out of order; listed by CreatedAt, ms apart.
	for _, c := range []struct {
		id string
		at time.Duration
	}{{"c", 3 * time.Millisecond}, {"a", 1 * time.Millisecond}, {"d", 40 * time.Hour}, {"b", 2 * time.Millisecond}} {
		must(t, "create "+c.id, s.CreateSession(ctx, session("acme", c.id, base.Add(c.at)), 0))
	}
	must(t, "create other", s.CreateSession(ctx, session("globex", "z", base), 0))
	list, err := s.ListSessions(ctx, "acme")
	must(t, "list", err)
	if got := ids(list); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Errorf("list = %v, want [a b c d]", got)
	}
	for _, sess := range list {
		if sess.Tenant != "acme" {
			t.Errorf("list has %s of tenant %q", sess.ID, sess.Tenant)
		}
	}
	empty, err := s.ListSessions(ctx, "nobody")
	must(t, "list empty", err)
	if len(empty) != 0 {
		t.Errorf("list of a tenant without sessions = %v", ids(empty))
	}
}

// testOtherTenant: another tenant's id is answered exactly as a missing id.
func testOtherTenant(t *testing.T, s workspace.Store) {
	ctx := t.Context()
	theirs := session("globex", "theirs", base)
	must(t, "create", s.CreateSession(ctx, theirs, 0))
	const missing = "absent"
	same := func(op string, errTheirs, errMissing error) {
		t.Helper()
		isErr(t, op+" other tenant's", errTheirs, workspace.ErrNotFound)
		isErr(t, op+" missing", errMissing, workspace.ErrNotFound)
		a := strings.ReplaceAll(errTheirs.Error(), "theirs", "ID")
		b := strings.ReplaceAll(errMissing.Error(), missing, "ID")
		if a != b {
			t.Errorf("%s: other tenant's id answers %q, a missing one %q", op, errTheirs, errMissing)
		}
	}
	_, e1 := s.GetSession(ctx, "acme", "theirs")
	_, e2 := s.GetSession(ctx, "acme", missing)
	same("get", e1, e2)
	same("touch", s.TouchSession(ctx, "acme", "theirs", base), s.TouchSession(ctx, "acme", missing, base))
	mine := session("acme", "theirs", base)
	mine.State = workspace.StateFailed
	same("update", s.UpdateSession(ctx, mine), s.UpdateSession(ctx, session("acme", missing, base)))
	same("delete", s.DeleteSession(ctx, "acme", "theirs"), s.DeleteSession(ctx, "acme", missing))

	// Theirs is untouched, and the same id is free for acme.
	got, err := s.GetSession(ctx, "globex", "theirs")
	must(t, "get theirs", err)
	equal(t, got, theirs)
	must(t, "create same id for acme", s.CreateSession(ctx, session("acme", "theirs", base), 1))
}

func testInvalid(t *testing.T, s workspace.Store) {
	ctx := t.Context()
	for _, c := range []struct{ tenant, id string }{
		{"", "s1"}, {"a:b", "s1"}, {"a/b", "s1"}, {"acme", ""},
	} {
		err := s.CreateSession(ctx, session(c.tenant, c.id, base), 0)
		isErr(t, fmt.Sprintf("create tenant %q id %q", c.tenant, c.id), err, workspace.ErrInvalid)
	}
	// An id with ':' or '/' is an ordinary id, and reads of odd ids are plain misses.
	must(t, "create odd id", s.CreateSession(ctx, session("acme", "x:y/z", base), 0))
	got, err := s.GetSession(ctx, "acme", "x:y/z")
	must(t, "get odd id", err)
	equal(t, got, session("acme", "x:y/z", base))
	_, err = s.GetSession(ctx, "acme:x", "y/z")
	isErr(t, "get across the separator", err, workspace.ErrNotFound)
	all, err := s.AllSessions(ctx)
	must(t, "all", err)
	if len(all) != 1 || all[0].Tenant != "acme" || all[0].ID != "x:y/z" {
		t.Errorf("all = %v", all)
	}
}

func testConflict(t *testing.T, s workspace.Store) {
	ctx := t.Context()
	orig := session("acme", "s1", base)
	must(t, "create", s.CreateSession(ctx, orig, 0))
	dup := session("acme", "s1", base.Add(time.Hour))
	dup.Image = "other"
	isErr(t, "create duplicate", s.CreateSession(ctx, dup, 0), workspace.ErrConflict)
	// Conflict is checked before the quota.
	isErr(t, "create duplicate at max", s.CreateSession(ctx, dup, 1), workspace.ErrConflict)
	got, err := s.GetSession(ctx, "acme", "s1")
	must(t, "get", err)
	equal(t, got, orig)
	list, err := s.ListSessions(ctx, "acme")
	must(t, "list", err)
	if len(list) != 1 {
		t.Errorf("list has %d sessions after a conflict, want 1", len(list))
	}
}

func testQuotaConcurrent(t *testing.T, s workspace.Store) {
	ctx := t.Context()
	const n, max = 50, 5
	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		created, refused int
	)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			err := s.CreateSession(ctx, session("acme", fmt.Sprintf("s%02d", i), base.Add(time.Duration(i)*time.Millisecond)), max)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case errors.Is(err, workspace.ErrQuota):
				refused++
			default:
				t.Errorf("create %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if created != max || refused != n-max {
		t.Fatalf("%d concurrent creates with max %d: %d created, %d refused; want %d, %d", n, max, created, refused, max, n-max)
	}
	list, err := s.ListSessions(ctx, "acme")
	must(t, "list", err)
	if len(list) != max {
		t.Fatalf("list has %d sessions, want %d", len(list), max)
	}
}

func testQuotaFreedByDelete(t *testing.T, s workspace.Store) {
	ctx := t.Context()
	for i := range 3 {
		must(t, "create", s.CreateSession(ctx, session("acme", fmt.Sprint("s", i), base), 3))
	}
	isErr(t, "create over max", s.CreateSession(ctx, session("acme", "s3", base), 3), workspace.ErrQuota)
	if _, err := s.GetSession(ctx, "acme", "s3"); !errors.Is(err, workspace.ErrNotFound) {
		t.Fatalf("a refused session was recorded (get: %v)", err)
	}
	must(t, "delete", s.DeleteSession(ctx, "acme", "s1"))
	must(t, "create in the freed slot", s.CreateSession(ctx, session("acme", "s3", base), 3))
	isErr(t, "create over max again", s.CreateSession(ctx, session("acme", "s4", base), 3), workspace.ErrQuota)
	// A lower max than the count refuses; max 0 is no limit.
	isErr(t, "create with lower max", s.CreateSession(ctx, session("acme", "s5", base), 1), workspace.ErrQuota)
	must(t, "create with no limit", s.CreateSession(ctx, session("acme", "s6", base), 0))
}

func testQuotaPerTenant(t *testing.T, s workspace.Store) {
	ctx := t.Context()
	must(t, "create acme", s.CreateSession(ctx, session("acme", "s1", base), 1))
	isErr(t, "create acme over max", s.CreateSession(ctx, session("acme", "s2", base), 1), workspace.ErrQuota)
	must(t, "create globex", s.CreateSession(ctx, session("globex", "s1", base), 1))
}

func testAllSessions(t *testing.T, s workspace.Store) {
	ctx := t.Context()
	all, err := s.AllSessions(ctx)
	must(t, "all empty", err)
	if len(all) != 0 {
		t.Fatalf("new store has sessions %v", ids(all))
	}
	want := map[string]*workspace.Session{}
	for i, tenant := range []string{"acme", "globex", "initech"} {
		for j := range i + 1 {
			sess := session(tenant, fmt.Sprint("s", j), base.Add(time.Duration(j)*time.Second))
			must(t, "create", s.CreateSession(ctx, sess, 0))
			want[tenant+"/"+sess.ID] = sess
		}
	}
	all, err = s.AllSessions(ctx)
	must(t, "all", err)
	if len(all) != len(want) {
		t.Fatalf("all has %d sessions, want %d", len(all), len(want))
	}
	for _, got := range all {
		w, ok := want[got.Tenant+"/"+got.ID]
		if !ok {
			t.Fatalf("all has unexpected %s/%s", got.Tenant, got.ID)
		}
		equal(t, got, w)
		delete(want, got.Tenant+"/"+got.ID)
	}
}

func ids(list []*workspace.Session) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = s.ID
	}
	return out
}
