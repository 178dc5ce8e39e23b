package agent

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/cwsdev/cws/version"
)

// WaitReady pings the agent that dial reaches until it answers, backing off from 5 ms
// to 500 ms, for at most limit: what a driver does before it calls a new sandbox ready.
func WaitReady(ctx context.Context, dial DialFunc, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	c := NewClient(dial, version.Version, nil)
	defer c.Close()
	var err error
	for delay := 5 * time.Millisecond; ; delay = min(delay*2, 500*time.Millisecond) {
		if _, err = c.Ping(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent did not answer: %v", err)
		case <-time.After(delay):
		}
	}
}

// Preopen opens a stream with dial for later use (a pooled sandbox's first call), or
// returns nil when it can't: the caller then dials as usual.
func Preopen(ctx context.Context, dial DialFunc) io.ReadWriteCloser {
	s, err := dial(ctx)
	if err != nil {
		return nil
	}
	return s
}
