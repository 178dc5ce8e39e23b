package auth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// maxJWKSSize caps a JWKS response body, in bytes.
const maxJWKSSize = 1 << 20

// jwksCache holds one tenant's fetched key set. It refetches when asked for an
// unknown kid or when the set is older than maxAge, but never more often than
// once per minInterval, so a flood of made-up kids costs one fetch per window.
// When a refresh fails, the keys it already has stay usable.
type jwksCache struct {
	tenant      string
	url         string
	client      *http.Client
	timeout     time.Duration // one fetch
	minInterval time.Duration // between two fetch attempts
	maxAge      time.Duration // after which a successful fetch is refreshed
	now         func() time.Time
	log         *slog.Logger

	fetchMu sync.Mutex // one fetch at a time; waiters then see its result

	mu        sync.Mutex // guards the fields below
	keys      []Key
	fetchedAt time.Time // last successful fetch
	attempted time.Time // last fetch attempt
	lastErr   error     // of the last attempt
}

// key returns the key with id kid, refreshing the set once if kid is unknown.
func (c *jwksCache) key(ctx context.Context, kid string) (Key, bool, error) {
	keys, fresh := c.snapshot()
	if k, ok := findKey(keys, kid); ok && fresh {
		return k, true, nil
	}
	keys, err := c.refresh(ctx)
	if k, ok := findKey(keys, kid); ok {
		return k, true, nil
	}
	return Key{}, false, err
}

// all returns the whole set, fetching it if it was never fetched or is stale.
func (c *jwksCache) all(ctx context.Context) ([]Key, error) {
	if keys, fresh := c.snapshot(); fresh {
		return keys, nil
	}
	return c.refresh(ctx)
}

// cached returns the set as it is, without fetching.
func (c *jwksCache) cached() []Key {
	keys, _ := c.snapshot()
	return keys
}

func (c *jwksCache) snapshot() (keys []Key, fresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.keys, !c.fetchedAt.IsZero() && c.now().Sub(c.fetchedAt) < c.maxAge
}

// refresh fetches the set unless an attempt was made within minInterval, and
// returns the keys it then has with the error of the latest attempt.
func (c *jwksCache) refresh(ctx context.Context) ([]Key, error) {
	c.fetchMu.Lock()
	defer c.fetchMu.Unlock()

	now := c.now()
	c.mu.Lock()
	if !c.attempted.IsZero() && now.Sub(c.attempted) < c.minInterval {
		keys, err := c.keys, c.lastErr
		c.mu.Unlock()
		return keys, err
	}
	c.attempted = now
	c.mu.Unlock()

	keys, skipped, err := c.fetch(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastErr = err
	if err != nil {
		c.log.Warn("jwks fetch failed", "tenant", c.tenant, "url", c.url, "err", err)
		return c.keys, err
	}
	if len(skipped) > 0 {
		c.log.Info("jwks keys skipped", "tenant", c.tenant, "url", c.url, "skipped", skipped)
	}
	c.keys, c.fetchedAt = keys, now
	return keys, nil
}

// fetch GETs and parses the key set. It outlives a cancelled caller (up to
// the timeout) so one client hanging up does not spoil the refresh for all.
func (c *jwksCache) fetch(ctx context.Context) ([]Key, []string, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("jwks %s: %w", c.url, err)
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("jwks: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("jwks %s: status %s", c.url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("jwks %s: read: %w", c.url, err)
	}
	if len(body) > maxJWKSSize {
		return nil, nil, fmt.Errorf("jwks %s: larger than %d bytes", c.url, maxJWKSSize)
	}
	keys, skipped, err := parseJWKSet(c.tenant, c.url, body)
	if err != nil {
		return nil, skipped, fmt.Errorf("jwks %s: %w", c.url, err)
	}
	return keys, skipped, nil
}

func findKey(keys []Key, kid string) (Key, bool) {
	for _, k := range keys {
		if k.ID == kid {
			return k, true
		}
	}
	return Key{}, false
}

// errKeysUnavailable is what a client is told when its tenant's JWKS could
// not be fetched; the cause is logged, not sent.
var errKeysUnavailable = errors.New("the tenant's signing keys are unavailable; try again later")
