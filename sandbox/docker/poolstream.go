package docker

import (
	"context"
	"io"

	"github.com/cwsdev/cws/sandbox/agent"
)

// Pre-opened agent streams: a pooled container's first `docker exec` of the bridge is
// paid while it waits in the pool, not by its session's first call.

// preopen opens an agent stream to a pooled container for its session's first
// Attach. It is best effort: nil means the session dials as usual.
func (d *Driver) preopen(ctx context.Context, id string) io.ReadWriteCloser {
	return agent.Preopen(ctx, func(ctx context.Context) (io.ReadWriteCloser, error) { return d.Attach(ctx, id) })
}
