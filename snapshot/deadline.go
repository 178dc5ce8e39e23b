package snapshot

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// DefaultStall is how long a store operation may go without progress before it fails:
// a hung object store (a server stopped, not refusing) is an error soon, never a call
// that waits for minutes.
const DefaultStall = 15 * time.Second

// stallBackend bounds every operation of a Backend by progress, not by total time: a
// Get's body, a Put's upload and a List's pages may take as long as they keep moving,
// and fail once they stall for longer than stall.
type stallBackend struct {
	b     Backend
	stall time.Duration
}

// WithStallTimeout returns b with every operation failing once it makes no progress
// for stall (0: DefaultStall).
func WithStallTimeout(b Backend, stall time.Duration) Backend {
	if stall <= 0 {
		stall = DefaultStall
	}
	return &stallBackend{b: b, stall: stall}
}

// watchdog cancels a context once it is not fed for a while.
type watchdog struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	t      *time.Timer
	d      time.Duration
	what   string
	mu     sync.Mutex
	done   bool
}

func (b *stallBackend) watch(ctx context.Context, what string) *watchdog {
	w := &watchdog{d: b.stall, what: what}
	w.ctx, w.cancel = context.WithCancelCause(ctx)
	w.t = time.AfterFunc(b.stall, func() {
		w.cancel(fmt.Errorf("snapshot store %s: %s made no progress for %s (is the store up?)", b.b, what, b.stall))
	})
	return w
}

// feed records progress.
func (w *watchdog) feed() {
	w.mu.Lock()
	if !w.done {
		w.t.Reset(w.d)
	}
	w.mu.Unlock()
}

// stop ends the watch; err, if the watch fired, becomes the watch's cause.
func (w *watchdog) stop(err error) error {
	w.mu.Lock()
	w.done = true
	w.t.Stop()
	w.mu.Unlock()
	if err != nil && w.ctx.Err() != nil {
		if cause := context.Cause(w.ctx); cause != nil && cause != context.Canceled {
			err = fmt.Errorf("%w (%v)", cause, err)
		}
	}
	w.cancel(nil)
	return err
}

// fedReader feeds a watchdog on every read that moves bytes.
type fedReader struct {
	r io.Reader
	w *watchdog
}

func (f fedReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if n > 0 {
		f.w.feed()
	}
	return n, err
}

// watchedBody is a Get's body: reads feed the watchdog, Close ends it.
type watchedBody struct {
	fedReader
	rc io.ReadCloser
}

// Read runs the watch only while it waits on the store: time the consumer takes
// between reads (a restore whose sandbox writes slowly) is not the store's.
func (b watchedBody) Read(p []byte) (int, error) {
	b.w.feed()
	n, err := b.rc.Read(p)
	b.w.pause()
	if err != nil && err != io.EOF {
		err = b.w.stopErr(err)
	}
	return n, err
}

// pause stops the watch's clock until the next feed.
func (w *watchdog) pause() {
	w.mu.Lock()
	w.t.Stop()
	w.mu.Unlock()
}

func (b watchedBody) Close() error {
	err := b.rc.Close()
	b.w.stop(nil)
	return err
}

// stopErr words err with the watch's cause when the watch fired, without ending it.
func (w *watchdog) stopErr(err error) error {
	if w.ctx.Err() != nil {
		if cause := context.Cause(w.ctx); cause != nil && cause != context.Canceled {
			return fmt.Errorf("%w (%v)", cause, err)
		}
	}
	return err
}

// Put is bounded by the time its size takes at a slow link (256 KiB/s) plus the stall
// time. The reader goes to the backend as it is: an S3 upload reads a file's parts in
// parallel through io.ReaderAt, and buffers a part before it sends it, so reads are no
// measure of its progress.
func (b *stallBackend) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	d := b.stall
	if size > 0 {
		d += time.Duration(size/(256<<10)) * time.Second
	}
	ctx, cancel := context.WithTimeoutCause(ctx, d, fmt.Errorf("snapshot store %s: put %s took more than %s (is the store up?)", b.b, key, d))
	defer cancel()
	err := b.b.Put(ctx, key, r, size)
	if err != nil && ctx.Err() != nil {
		if cause := context.Cause(ctx); cause != nil && cause != context.Canceled {
			err = fmt.Errorf("%w (%v)", cause, err)
		}
	}
	return err
}

func (b *stallBackend) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	w := b.watch(ctx, "get "+key)
	rc, err := b.b.Get(w.ctx, key)
	if err != nil {
		return nil, w.stop(err)
	}
	w.pause()
	return watchedBody{fedReader{rc, w}, rc}, nil
}

func (b *stallBackend) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	w := b.watch(ctx, "get "+key)
	rc, err := b.b.GetRange(w.ctx, key, off, n)
	if err != nil {
		return nil, w.stop(err)
	}
	w.pause()
	return watchedBody{fedReader{rc, w}, rc}, nil
}

func (b *stallBackend) Exists(ctx context.Context, key string) (bool, error) {
	w := b.watch(ctx, "stat "+key)
	ok, err := b.b.Exists(w.ctx, key)
	return ok, w.stop(err)
}

func (b *stallBackend) Touch(ctx context.Context, key string) error {
	w := b.watch(ctx, "touch "+key)
	return w.stop(b.b.Touch(w.ctx, key))
}

func (b *stallBackend) Delete(ctx context.Context, key string) error {
	w := b.watch(ctx, "delete "+key)
	return w.stop(b.b.Delete(w.ctx, key))
}

func (b *stallBackend) List(ctx context.Context, prefix string, fn func(Object) error) error {
	w := b.watch(ctx, "list "+prefix)
	return w.stop(b.b.List(w.ctx, prefix, func(o Object) error {
		w.feed()
		return fn(o)
	}))
}

func (b *stallBackend) String() string { return b.b.String() }

// Unwrap returns the backend beneath.
func (b *stallBackend) Unwrap() Backend { return b.b }
