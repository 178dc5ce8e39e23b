package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cwsdev/cws/workspace"
)

// allowScript counts one event in KEYS[1], giving a new counter a PX TTL of ARGV[1].
var allowScript = redis.NewScript(`
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return n
`)

// Allow counts one event against key in the fixed window (aligned to the Unix epoch,
// millisecond resolution, on Options.Now) that holds now, and reports whether the
// count is within limit. limit <= 0 means no limit; nothing is counted.
func (s *Store) Allow(ctx context.Context, key string, limit int, window time.Duration) (bool, error) {
	if window < time.Millisecond {
		return false, fmt.Errorf("%w: rate window %v is under 1ms", workspace.ErrInvalid, window)
	}
	if limit <= 0 {
		return true, nil
	}
	ms := window.Milliseconds()
	start := s.now().UnixMilli() / ms * ms
	n, err := allowScript.Run(ctx, s.rdb, []string{s.rateKey(key, start)}, ms).Int64()
	if err != nil {
		return false, s.fail("allow", err)
	}
	return n <= int64(limit), nil
}
