package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// FileBackend keeps objects as files beneath a directory: a key is a relative path.
// A Put writes a temporary file beside the object and renames it into place.
type FileBackend struct {
	dir     string
	durable sync.Map // directories this process made durable in their parents
}

// NewFileBackend returns the backend of dir (absolute), which it makes if need be.
func NewFileBackend(dir string) (*FileBackend, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("snapshot store: file:// needs an absolute directory, got %q", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	return &FileBackend{dir: filepath.Clean(dir)}, nil
}

func (b *FileBackend) String() string { return "file://" + b.dir }

func (b *FileBackend) path(key string) (string, error) {
	if err := validKey(key); err != nil {
		return "", err
	}
	return filepath.Join(b.dir, filepath.FromSlash(key)), nil
}

func (b *FileBackend) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	p, err := b.path(key)
	if err != nil {
		return err
	}
	// Everything but a mark (a lease, the collection's) is durable before Put returns,
	// with the directories made for it: an archive may be the only copy. Packs are
	// few and large, so an fsync each costs little.
	durable := !strings.Contains(key, "/leases/") && !strings.HasSuffix(key, "/collecting")
	if durable {
		err = b.mkdirDurable(filepath.Dir(p))
	} else {
		err = os.MkdirAll(filepath.Dir(p), 0o700)
	}
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".put-*")
	if errors.Is(err, fs.ErrNotExist) && durable {
		// Its directory was removed from outside since this process made it durable:
		// forget that, and make it again.
		b.forgetDurable(filepath.Dir(p))
		if err = b.mkdirDurable(filepath.Dir(p)); err == nil {
			f, err = os.CreateTemp(filepath.Dir(p), ".put-*")
		}
	}
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = io.Copy(f, r)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err == nil && durable {
		err = syncDir(filepath.Dir(p))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("snapshot store: put %s: %w", key, err)
	}
	return nil
}

// syncDir makes a directory's entries durable (a rename into it, a file made in it).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// forgetDurable forgets that dir and its parents were made durable.
func (b *FileBackend) forgetDurable(dir string) {
	for ; len(dir) > len(b.dir); dir = filepath.Dir(dir) {
		b.durable.Delete(dir)
	}
}

// mkdirDurable makes dir and its missing parents beneath the store, and makes each
// durable in its parent, once per process: a directory a mark's Put made (not
// durable) is made so when a durable object first goes beneath it.
func (b *FileBackend) mkdirDurable(dir string) error {
	if len(dir) <= len(b.dir) {
		return nil
	}
	if _, ok := b.durable.Load(dir); ok {
		return nil
	}
	parent := filepath.Dir(dir)
	if err := b.mkdirDurable(parent); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := syncDir(parent); err != nil {
		return err
	}
	b.durable.Store(dir, true)
	return nil
}

func (b *FileBackend) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := b.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	return f, err
}

func (b *FileBackend) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if off < 0 || n <= 0 {
		return nil, fmt.Errorf("snapshot store: get %s: bad range %d+%d", key, off, n)
	}
	rc, err := b.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	f := rc.(*os.File)
	if fi, err := f.Stat(); err != nil || fi.Size() < off+n {
		f.Close()
		if err == nil {
			err = fmt.Errorf("range %d+%d past its end (%d bytes)", off, n, fi.Size())
		}
		return nil, fmt.Errorf("snapshot store: get %s: %w", key, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, off, n), f}, nil
}

func (b *FileBackend) Exists(ctx context.Context, key string) (bool, error) {
	p, err := b.path(key)
	if err != nil {
		return false, err
	}
	_, err = os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

func (b *FileBackend) Touch(ctx context.Context, key string) error {
	p, err := b.path(key)
	if err != nil {
		return err
	}
	now := time.Now()
	if err := os.Chtimes(p, now, now); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", key, ErrNotFound)
	} else {
		return err
	}
}

func (b *FileBackend) Delete(ctx context.Context, key string) error {
	p, err := b.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (b *FileBackend) List(ctx context.Context, prefix string, fn func(Object) error) error {
	// Walk the deepest directory the prefix names fully, and filter by the rest.
	root := b.dir
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		root = filepath.Join(b.dir, filepath.FromSlash(prefix[:i]))
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), ".put-") {
			return nil
		}
		rel, err := filepath.Rel(b.dir, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		return fn(Object{Key: key, Size: info.Size(), Modified: info.ModTime()})
	})
	return err
}
