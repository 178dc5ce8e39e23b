package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// putStateScript sets or deletes one field of a session's state hash, if the session
// exists. KEYS: session, state hash. ARGV: field, value, "1" to delete.
var putStateScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[3] == '1' then redis.call('HDEL', KEYS[2], ARGV[1]) else redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
return 1
`)

// getStateScript reads one field of a session's state hash, if the session exists.
// KEYS: session, state hash. ARGV: field. It returns {exists, value}.
var getStateScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
return {1, redis.call('HGET', KEYS[2], ARGV[1])}
`)

// GetState returns a session's state value under key (nil when unset).
func (s *Store) GetState(ctx context.Context, tenant, id, key string) ([]byte, error) {
	if !validTenant(tenant) {
		return nil, notFound(id)
	}
	res, err := getStateScript.Run(ctx, s.rdb, []string{s.sessionKey(tenant, id), s.stateKey(tenant, id)}, key).Slice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, s.fail("get state", err)
	}
	if len(res) == 0 || res[0] == int64(0) {
		return nil, notFound(id)
	}
	if len(res) < 2 || res[1] == nil {
		return nil, nil
	}
	v, _ := res[1].(string)
	return []byte(v), nil
}

// PutState sets (or, with nil, deletes) a session's state value under key.
func (s *Store) PutState(ctx context.Context, tenant, id, key string, value []byte) error {
	if !validTenant(tenant) {
		return notFound(id)
	}
	del := "0"
	if value == nil {
		del = "1"
	}
	n, err := putStateScript.Run(ctx, s.rdb, []string{s.sessionKey(tenant, id), s.stateKey(tenant, id)}, key, value, del).Int()
	if err != nil {
		return s.fail("put state", err)
	}
	if n == 0 {
		return notFound(id)
	}
	return nil
}

func (s *Store) stateKey(tenant, id string) string {
	return s.prefix + "state:" + tenant + ":" + id
}
