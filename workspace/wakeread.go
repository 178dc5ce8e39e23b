package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/cwsdev/cws/snapshot"
)

// A wake from an archive reads the archive while its sandbox starts: the snapshot
// record, its entries and the first files are fetched into a buffer of up to
// wakeReadAhead bytes before the agent can take any, so the store's round trips and
// the sandbox's start overlap instead of adding up.

// wakeReadAhead is how far the read of an archive runs ahead of the restore.
const wakeReadAhead = 16 << 20

// errWakeAbandoned ends the read of an archive whose wake failed elsewhere.
var errWakeAbandoned = errors.New("the wake was abandoned")

// archiveRead is a read of a tenant's snapshot from the store, under way.
type archiveRead struct {
	id     string
	pipe   *aheadPipe
	cancel context.CancelFunc
	done   chan struct{}
	notes  snapshot.ReadNotes
	err    error // once done is closed
}

// readArchive starts reading snapshot id of tenant into a buffered pipe; failed is
// called if the read fails (to stop the sandbox's start).
func (s *Service) readArchive(ctx context.Context, tenant, id string, failed func()) *archiveRead {
	ctx, cancel := context.WithCancel(ctx)
	rd := &archiveRead{id: id, pipe: newAheadPipe(wakeReadAhead), cancel: cancel, done: make(chan struct{})}
	go func() {
		rd.notes, rd.err = s.cfg.Snapshots.Read(ctx, tenant, id, rd.pipe)
		rd.pipe.closeWrite(rd.err)
		close(rd.done) // before failed: who it stops finds the failure
		if rd.err != nil && !errors.Is(rd.err, errWakeAbandoned) {
			failed()
		}
	}()
	return rd
}

// stop abandons the read and waits until it has returned.
func (rd *archiveRead) stop() {
	rd.pipe.closeRead(errWakeAbandoned)
	rd.cancel()
	<-rd.done
}

// wait returns the read's outcome once it is over; the reader's side must be done
// (closeRead), or the read may wait for it.
func (rd *archiveRead) wait() (snapshot.ReadNotes, error) {
	<-rd.done
	rd.cancel()
	return rd.notes, rd.err
}

// failure is the read's error if it has already failed, as the restore words it.
func (rd *archiveRead) failure() error {
	select {
	case <-rd.done:
		if rd.err != nil {
			return rd.readError(rd.err)
		}
	default:
	}
	return nil
}

// readError words a failed read of the store: a snapshot or blob the store lacks is
// snapshot.ErrNotFound, anything else a store that may answer later (errStoreRead).
func (rd *archiveRead) readError(err error) error {
	if errors.Is(err, snapshot.ErrNotFound) {
		return fmt.Errorf("restore snapshot %s: %w", rd.id, err)
	}
	return fmt.Errorf("%w: restore snapshot %s: %w: %v", ErrUnavailable, rd.id, errStoreRead, err)
}

// aheadPipe is an io.Pipe with a buffer: Write returns once its bytes are copied in,
// and blocks only while max bytes wait for the reader.
type aheadPipe struct {
	mu     sync.Mutex
	cond   sync.Cond
	chunks [][]byte // unread, the first from off
	off    int
	n      int // unread bytes
	max    int
	werr   error // the writer's end: io.EOF or its failure
	rerr   error // the reader's end
	// What each side waited for the other: the store's read for the agent to take
	// bytes (the buffer full), the agent for the store (the buffer empty).
	writerWait, readerWait time.Duration
}

// aheadChunk is the size of the buffer's chunks (a larger write is one chunk).
const aheadChunk = 256 << 10

func newAheadPipe(max int) *aheadPipe {
	p := &aheadPipe{max: max}
	p.cond.L = &p.mu
	return p
}

func (p *aheadPipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n >= p.max && p.rerr == nil {
		t0 := time.Now()
		for p.n >= p.max && p.rerr == nil {
			p.cond.Wait()
		}
		p.writerWait += time.Since(t0)
	}
	if p.rerr != nil {
		return 0, p.rerr
	}
	if p.werr != nil {
		return 0, io.ErrClosedPipe
	}
	if k := len(p.chunks); k > 0 && cap(p.chunks[k-1])-len(p.chunks[k-1]) >= len(b) {
		p.chunks[k-1] = append(p.chunks[k-1], b...)
	} else {
		c := make([]byte, len(b), max(len(b), aheadChunk))
		copy(c, b)
		p.chunks = append(p.chunks, c)
	}
	p.n += len(b)
	p.cond.Broadcast()
	return len(b), nil
}

func (p *aheadPipe) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 && p.werr == nil && p.rerr == nil {
		t0 := time.Now()
		for p.n == 0 && p.werr == nil && p.rerr == nil {
			p.cond.Wait()
		}
		p.readerWait += time.Since(t0)
	}
	if p.rerr != nil {
		return 0, io.ErrClosedPipe
	}
	if p.n == 0 {
		return 0, p.werr
	}
	k := 0
	for k < len(b) && len(p.chunks) > 0 {
		c := copy(b[k:], p.chunks[0][p.off:])
		k, p.off = k+c, p.off+c
		if p.off == len(p.chunks[0]) {
			p.chunks[0] = nil
			p.chunks, p.off = p.chunks[1:], 0
		}
	}
	p.n -= k
	p.cond.Broadcast()
	return k, nil
}

// waits returns how long the store's read waited for the agent, and the agent for
// the store's read.
func (p *aheadPipe) waits() (store, agent time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.writerWait, p.readerWait
}

// closeWrite ends the stream: the reader gets err (io.EOF if nil) once it has read
// what is buffered.
func (p *aheadPipe) closeWrite(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.werr == nil {
		p.werr = err
		if err == nil {
			p.werr = io.EOF
		}
	}
	p.cond.Broadcast()
}

// closeRead ends the reader's side: what is buffered is dropped and a Write still
// under way fails with err.
func (p *aheadPipe) closeRead(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rerr == nil {
		p.rerr = err
	}
	p.chunks, p.n, p.off = nil, 0, 0
	p.cond.Broadcast()
}
