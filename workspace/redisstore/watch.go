package redisstore

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// changedChannel is the pub/sub channel every write of a session record (update,
// touch, delete) is announced on, with "tenant/id" as the message, so that replicas
// drop what they cache of it (workspace's session cache).
func (s *Store) changedChannel() string { return s.prefix + "sessions:changed" }

// watchHealth is how long the watch waits for a message before it pings Redis; a
// ping that goes unanswered as long again counts as a lost subscription.
const watchHealth = 5 * time.Second

// WatchSessions reports every session write announced by any replica to changed, until
// ctx ends. live is called with false, and reset, whenever the subscription is lost or
// in doubt (messages may have been missed: a cache must forget everything), and with
// true once it is back; nothing can be cached before the first live(true).
func (s *Store) WatchSessions(ctx context.Context, changed func(tenant, id string), live func(bool)) {
	ps := s.rdb.Subscribe(ctx, s.changedChannel())
	defer ps.Close()
	pinged := false
	for ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(ctx, watchHealth)
		switch m := msg.(type) {
		case *redis.Subscription: // the first subscription, or a resubscription after a reconnect
			live(false)
			live(true)
			pinged = false
		case *redis.Message:
			if tenant, id, ok := strings.Cut(m.Payload, "/"); ok {
				changed(tenant, id)
			}
			live(true)
			pinged = false
		case *redis.Pong:
			live(true)
			pinged = false
		}
		if err == nil {
			continue
		}
		var timeout interface{ Timeout() bool }
		if errors.As(err, &timeout) && timeout.Timeout() && !pinged {
			pinged = ps.Ping(ctx) == nil
			if pinged {
				continue
			}
		}
		live(false)
		pinged = false
		select { // the next Receive reconnects
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// announce publishes a write of tenant's session id.
func (s *Store) announce(ctx context.Context, p redis.Pipeliner, tenant, id string) {
	p.Publish(ctx, s.changedChannel(), tenant+"/"+id)
}
