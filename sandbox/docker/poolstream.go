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

// handOver keeps a bound container's pre-opened stream for its first Attach.
func (d *Driver) handOver(b pooledBox) {
	if b.stream != nil {
		d.streams.Store(b.id, b.stream)
	}
}

// preopened returns (once) the pre-opened agent stream of a container handed out from
// the pool, or nil.
func (d *Driver) preopened(id string) io.ReadWriteCloser {
	if s, ok := d.streams.LoadAndDelete(id); ok {
		return s.(io.ReadWriteCloser)
	}
	return nil
}

// dropStream closes the pre-opened stream of a container being removed, if unused.
func (d *Driver) dropStream(id string) {
	if s := d.preopened(id); s != nil {
		s.Close()
	}
}
