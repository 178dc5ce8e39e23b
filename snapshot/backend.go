// Package snapshot is the snapshot store: the whole of a workspace (its files, .git and
// denied paths included, and the session's image, env and labels) kept outside any
// sandbox. Snapshots, forks and archived sessions are one mechanism: a manifest of the
// workspace's entries plus content-addressed blobs.
//
// Layout, under the store's prefix, per tenant (nothing is shared between tenants):
//
//	<tenant>/blobs/<aa>/<sha256>   a file's contents, zstd-compressed, named by the
//	                               SHA-256 of the uncompressed contents
//	<tenant>/meta/<id>.json        a snapshot's record (Snapshot, without entries)
//	<tenant>/entries/<id>.json.zst its entries (paths, modes, links, blob names)
//
// A file already stored for the tenant is not stored again: a second snapshot of a
// workspace that barely changed writes its record, its entries and the changed files.
// Blobs no record references are collected (Store.Collect).
//
// The backend is a local directory (file:///var/lib/cws/snapshots) on one host, or any
// S3-compatible object store (s3://bucket/prefix, with the usual AWS_* settings).
package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"
)

// ErrNotFound is a blob, record or snapshot that does not exist.
var ErrNotFound = errors.New("not found")

// Object is what List reports of a stored object.
type Object struct {
	Key      string
	Size     int64
	Modified time.Time
}

// Backend stores objects by key ("a/b/c", never absolute, never with "..").
type Backend interface {
	// Put stores r (size bytes, or -1 when unknown) under key, replacing what is there.
	// A reader of key sees the old object or the whole new one, never a part.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get opens key; ErrNotFound when it does not exist.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// GetRange opens n bytes of key from offset off (a pack's blobs); ErrNotFound when
	// key does not exist. A range past the end is an error, never a short read.
	GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)
	// Exists reports whether key exists.
	Exists(ctx context.Context, key string) (bool, error)
	// Touch marks key as used now (its Modified), so a collection that started before
	// does not take it for garbage; ErrNotFound when it does not exist.
	Touch(ctx context.Context, key string) error
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List calls fn for every object whose key starts with prefix.
	List(ctx context.Context, prefix string, fn func(Object) error) error
	// String names the backend for logs (no credentials).
	String() string
}

// Open opens the backend a URL names: file:///absolute/dir or s3://bucket[/prefix]
// (AWS_ENDPOINT_URL or AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN and AWS_REGION from getenv; http:// endpoints are plain HTTP).
func Open(ctx context.Context, raw string, getenv func(string) string) (Backend, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("snapshot store %q: %w", raw, err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("snapshot store %q: a file URL names a local directory: file:///path", raw)
		}
		return NewFileBackend(u.Path)
	case "s3":
		return NewS3Backend(ctx, u.Host, strings.Trim(u.Path, "/"), getenv)
	case "":
		return nil, fmt.Errorf("snapshot store %q: want file:///dir or s3://bucket/prefix", raw)
	default:
		return nil, fmt.Errorf("snapshot store %q: unknown scheme %q: want file:///dir or s3://bucket/prefix", raw, u.Scheme)
	}
}

// validKey keeps keys relative and free of "." and ".." parts.
func validKey(key string) error {
	if key == "" || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
		return fmt.Errorf("snapshot store: bad key %q", key)
	}
	for _, p := range strings.Split(key, "/") {
		if p == "" || p == "." || p == ".." {
			return fmt.Errorf("snapshot store: bad key %q", key)
		}
	}
	return nil
}
