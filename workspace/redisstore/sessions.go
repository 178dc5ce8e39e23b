package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cwsdev/cws/workspace"
)

// createScript records a session with its two index entries, and announces it (an
// adopted session may be cached from before the store lost it), or refuses.
// KEYS: session, tenant zset, all set. ARGV: json, max, score, id, "tenant/id", the
// changed channel.
var createScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 1 end
local max = tonumber(ARGV[2])
if max > 0 and redis.call('ZCARD', KEYS[2]) >= max then return 2 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
redis.call('SADD', KEYS[3], ARGV[5])
redis.call('PUBLISH', ARGV[6], ARGV[5])
return 0
`)

// deleteScript removes a session, its index entries and its state hash, and announces
// it; it returns how many session keys it deleted (0 or 1). KEYS: session, tenant zset,
// all set, state. ARGV: id, "tenant/id", the changed channel.
var deleteScript = redis.NewScript(`
local n = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[4])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[2])
return n
`)

// CreateSession records sess, enforcing max atomically (see the package doc).
func (s *Store) CreateSession(ctx context.Context, sess *workspace.Session, max int) error {
	if !validTenant(sess.Tenant) {
		return fmt.Errorf("%w: session tenant %q: must be non-empty without ':' or '/'", workspace.ErrInvalid, sess.Tenant)
	}
	if sess.ID == "" {
		return fmt.Errorf("%w: session id is empty", workspace.ErrInvalid)
	}
	b, err := json.Marshal(sess)
	if err != nil {
		return fmt.Errorf("encode session %q: %w", sess.ID, err)
	}
	keys := []string{s.sessionKey(sess.Tenant, sess.ID), s.tenantKey(sess.Tenant), s.allKey()}
	score := strconv.FormatInt(sess.CreatedAt.UnixMicro(), 10)
	res, err := createScript.Run(ctx, s.rdb, keys, b, max, score, sess.ID, sess.Tenant+"/"+sess.ID, s.changedChannel()).Int()
	if err != nil {
		return s.fail("create session", err)
	}
	switch res {
	case 1:
		return fmt.Errorf("session %q: %w", sess.ID, workspace.ErrConflict)
	case 2:
		return fmt.Errorf("tenant %q has %d sessions: %w", sess.Tenant, max, workspace.ErrQuota)
	}
	return nil
}

// GetSession returns a tenant's session.
func (s *Store) GetSession(ctx context.Context, tenant, id string) (*workspace.Session, error) {
	if !validTenant(tenant) {
		return nil, notFound(id)
	}
	b, err := s.rdb.Get(ctx, s.sessionKey(tenant, id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, s.fail("get session", err)
	}
	return decode(b, tenant, id)
}

// UpdateSession overwrites a session that exists (SET XX), and announces it. The tenant
// index keeps the CreatedAt the session was created with: it is not expected to change.
func (s *Store) UpdateSession(ctx context.Context, sess *workspace.Session) error {
	if !validTenant(sess.Tenant) {
		return notFound(sess.ID)
	}
	b, err := json.Marshal(sess)
	if err != nil {
		return fmt.Errorf("encode session %q: %w", sess.ID, err)
	}
	var set *redis.BoolCmd
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		set = p.SetXX(ctx, s.sessionKey(sess.Tenant, sess.ID), b, 0)
		s.announce(ctx, p, sess.Tenant, sess.ID)
		return nil
	})
	ok := set.Val()
	if err != nil {
		return s.fail("update session", err)
	}
	if !ok {
		return notFound(sess.ID)
	}
	return nil
}

// touchAttempts bounds the optimistic retries of TouchSession under contention.
const touchAttempts = 100

// TouchSession rewrites LastUsed, and announces it, retrying when another writer changed
// the session between the read and the write (WATCH).
func (s *Store) TouchSession(ctx context.Context, tenant, id string, at time.Time) error {
	if !validTenant(tenant) {
		return notFound(id)
	}
	key := s.sessionKey(tenant, id)
	touch := func(tx *redis.Tx) error {
		b, err := tx.Get(ctx, key).Bytes()
		if errors.Is(err, redis.Nil) {
			return notFound(id)
		}
		if err != nil {
			return err
		}
		sess, err := decode(b, tenant, id)
		if err != nil {
			return err
		}
		sess.LastUsed = at
		if b, err = json.Marshal(sess); err != nil {
			return fmt.Errorf("encode session %q: %w", id, err)
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, key, b, 0)
			s.announce(ctx, p, tenant, id)
			return nil
		})
		return err
	}
	for range touchAttempts {
		err := s.rdb.Watch(ctx, touch, key)
		switch {
		case errors.Is(err, redis.TxFailedErr):
			continue
		case err == nil, errors.Is(err, workspace.ErrNotFound), errors.Is(err, errCorrupt):
			return err
		}
		return s.fail("touch session", err)
	}
	return fmt.Errorf("%w: touch session %q: still contended after %d attempts", workspace.ErrUnavailable, id, touchAttempts)
}

// DeleteSession removes a session and its index entries atomically.
func (s *Store) DeleteSession(ctx context.Context, tenant, id string) error {
	if !validTenant(tenant) {
		return notFound(id)
	}
	keys := []string{s.sessionKey(tenant, id), s.tenantKey(tenant), s.allKey(), s.stateKey(tenant, id)}
	n, err := deleteScript.Run(ctx, s.rdb, keys, id, tenant+"/"+id, s.changedChannel()).Int()
	if err != nil {
		return s.fail("delete session", err)
	}
	if n == 0 {
		return notFound(id)
	}
	return nil
}

// ListSessions returns a tenant's sessions in the order of its index: by CreatedAt
// (microseconds), then id.
func (s *Store) ListSessions(ctx context.Context, tenant string) ([]*workspace.Session, error) {
	if !validTenant(tenant) {
		return nil, nil
	}
	ids, err := s.rdb.ZRange(ctx, s.tenantKey(tenant), 0, -1).Result()
	if err != nil {
		return nil, s.fail("list sessions", err)
	}
	refs := make([]ref, len(ids))
	for i, id := range ids {
		refs[i] = ref{tenant, id}
	}
	return s.load(ctx, refs)
}

// AllSessions returns every tenant's sessions, in no particular order.
func (s *Store) AllSessions(ctx context.Context) ([]*workspace.Session, error) {
	var refs []ref
	it := s.rdb.SScan(ctx, s.allKey(), 0, "", 1000).Iterator()
	for it.Next(ctx) {
		tenant, id, ok := strings.Cut(it.Val(), "/")
		if !ok {
			continue // not ours
		}
		refs = append(refs, ref{tenant, id})
	}
	if err := it.Err(); err != nil {
		return nil, s.fail("all sessions", err)
	}
	return s.load(ctx, refs)
}

type ref struct{ tenant, id string }

// loadBatch is how many sessions one pipeline reads.
const loadBatch = 500

// load reads sessions in pipelined batches, keeping refs' order. A session deleted
// since its index was read is left out.
func (s *Store) load(ctx context.Context, refs []ref) ([]*workspace.Session, error) {
	out := make([]*workspace.Session, 0, len(refs))
	for len(refs) > 0 {
		batch := refs[:min(len(refs), loadBatch)]
		refs = refs[len(batch):]
		cmds := make([]*redis.StringCmd, len(batch))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, r := range batch {
				cmds[i] = p.Get(ctx, s.sessionKey(r.tenant, r.id))
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, s.fail("load sessions", err)
		}
		for i, cmd := range cmds {
			b, err := cmd.Bytes()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				return nil, s.fail("load sessions", err)
			}
			sess, err := decode(b, batch[i].tenant, batch[i].id)
			if err != nil {
				return nil, err
			}
			out = append(out, sess)
		}
	}
	return out, nil
}

var errCorrupt = errors.New("corrupt session record")

// decode parses a stored session and checks it is the one its key names.
func decode(b []byte, tenant, id string) (*workspace.Session, error) {
	var sess workspace.Session
	if err := json.Unmarshal(b, &sess); err != nil {
		return nil, fmt.Errorf("%w %s/%s: %w", errCorrupt, tenant, id, err)
	}
	if sess.Tenant != tenant || sess.ID != id {
		return nil, fmt.Errorf("%w %s/%s: holds %s/%s", errCorrupt, tenant, id, sess.Tenant, sess.ID)
	}
	return &sess, nil
}

// validTenant: a tenant with ':' or '/' would make keys ambiguous; none can exist.
func validTenant(tenant string) bool {
	return tenant != "" && !strings.ContainsAny(tenant, ":/")
}

func notFound(id string) error {
	return fmt.Errorf("session %q: %w", id, workspace.ErrNotFound)
}
