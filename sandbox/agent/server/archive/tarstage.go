package archive

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"path"
	"sync"

	"github.com/cwsdev/cws/sandbox/agent/server/fs"
)

// The staging side of tar.in: the hidden directory an upload is extracted into, and the
// merge that moves an accepted archive into place.

// activeStaging holds the staging directories of uploads in progress in this process
// (by absolute path), so the sweep of stale ones never removes a live one.
var activeStaging sync.Map

// merge moves the staged tree src into dst (both workspace-relative real paths) by the
// merge rules above. Parents go before their children, so nothing below dst is followed.
func (x *extraction) merge(src, dst string) error {
	root := x.h.WS.Root()
	ents, err := x.h.WS.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		s, d := path.Join(src, e.Name()), path.Join(dst, e.Name())
		if !e.IsDir() {
			if err := root.Rename(s, d); err != nil {
				return err
			}
			continue
		}
		fi, err := root.Lstat(d)
		switch {
		case errors.Is(err, iofs.ErrNotExist):
			err = root.Rename(s, d)
		case err != nil:
		case fi.IsDir():
			err = x.merge(s, d)
		default:
			if err = root.Remove(d); err == nil {
				err = root.Rename(s, d)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// newStaging creates a fresh staging directory at the workspace root, after removing
// stale ones, and returns its name.
func (h *Handlers) newStaging() (string, error) {
	if ents, err := h.WS.ReadDir("."); err == nil {
		for _, e := range ents {
			if !fs.IsStaging(e.Name()) {
				continue
			}
			if _, live := activeStaging.Load(path.Join(h.WS.Dir(), e.Name())); !live {
				_ = h.WS.Root().RemoveAll(e.Name())
			}
		}
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := fs.StagingPrefix + hex.EncodeToString(b[:])
	activeStaging.Store(path.Join(h.WS.Dir(), name), struct{}{})
	if err := h.WS.Root().Mkdir(name, 0o700); err != nil {
		activeStaging.Delete(path.Join(h.WS.Dir(), name))
		return "", fmt.Errorf("create staging directory: %w", err)
	}
	return name, nil
}

func (h *Handlers) dropStaging(name string) {
	if err := h.WS.Root().RemoveAll(name); err != nil {
		h.Log.Warn("staging directory not removed", "dir", name, "err", err)
	}
	activeStaging.Delete(path.Join(h.WS.Dir(), name))
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
