package workspace_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
)

// frozenStore answers nothing until the caller gives up, like a Redis under SIGSTOP.
type frozenStore struct{ workspace.Store }

func (frozenStore) GetSession(ctx context.Context, tenant, id string) (*workspace.Session, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestBoundedStore(t *testing.T) {
	var failures []string
	var up bool
	b := workspace.BoundStore(frozenStore{memstore.New()}, 20*time.Millisecond, func(ok bool, kind string) {
		up = ok
		if !ok {
			failures = append(failures, kind)
		}
	})
	_, err := b.GetSession(context.Background(), "t", "s-1")
	if !errors.Is(err, workspace.ErrUnavailable) || up || len(failures) != 1 || failures[0] != workspace.StoreTimeout {
		t.Fatalf("frozen store: err %v, up %v, failures %v; want ErrUnavailable, down, [timeout]", err, up, failures)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.GetSession(ctx, "t", "s-1"); !errors.Is(err, context.Canceled) || errors.Is(err, workspace.ErrUnavailable) {
		t.Errorf("caller's cancellation: %v, want context.Canceled as it is", err)
	}
	if _, err := b.ListSessions(context.Background(), "t"); err != nil || !up {
		t.Errorf("a store that answers: %v, up %v", err, up)
	}
}
