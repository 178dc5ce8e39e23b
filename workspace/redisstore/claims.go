package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// claimScript sets KEYS[1] to ARGV[1] unless it is set to another value, with a PX TTL
// of ARGV[2] ms when that is > 0 (set to ARGV[1] already: the TTL is renewed). It
// returns {value in force, 1 if this call set or renewed it}.
var claimScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return {cur, 0} end
local ms = tonumber(ARGV[2])
if ms > 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ms)
else
  redis.call('SET', KEYS[1], ARGV[1])
end
return {ARGV[1], 1}
`)

// releaseScript deletes KEYS[1] if it holds ARGV[1].
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// Claim sets key to value unless it is set. ttl is rounded up to whole milliseconds.
func (s *Store) Claim(ctx context.Context, key, value string, ttl time.Duration) (string, bool, error) {
	var ms int64
	if ttl > 0 {
		ms = (ttl + time.Millisecond - 1).Milliseconds() // round up: PX takes whole ms
	}
	res, err := claimScript.Run(ctx, s.rdb, []string{s.claimKey(key)}, value, ms).Slice()
	if err != nil {
		return "", false, s.fail("claim", err)
	}
	cur, _ := res[0].(string)
	claimed, _ := res[1].(int64)
	return cur, claimed == 1, nil
}

// Release deletes key if it still holds value.
func (s *Store) Release(ctx context.Context, key, value string) error {
	return s.fail("release", releaseScript.Run(ctx, s.rdb, []string{s.claimKey(key)}, value).Err())
}
