package docker

import (
	"context"
	"io"
)

// Pre-opened agent streams: a pooled container's first `docker exec` of the bridge is
// paid while it waits in the pool, not by its session's first call.

// preopen opens an agent stream to a pooled container for its session's first
// Attach. It is best effort: nil means the session dials as usual.
func (d *Driver) preopen(ctx context.Context, id string) io.ReadWriteCloser {
	s, err := d.Attach(ctx, id)
	if err != nil {
		d.log.Debug("pre-open agent stream", "container", id, "err", err)
		return nil
	}
	return s
}
