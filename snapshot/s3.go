package snapshot

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Backend keeps objects in an S3-compatible bucket under a prefix (minio-go).
type S3Backend struct {
	c      *minio.Client
	bucket string
	prefix string // "" or "dir/…/" with its slash
	where  string
}

// NewS3Backend connects to bucket. The endpoint is AWS_ENDPOINT_URL_S3, else
// AWS_ENDPOINT_URL, else AWS's own (https://s3.amazonaws.com); a custom endpoint is
// addressed path-style. Credentials are AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
// AWS_SESSION_TOKEN, else the instance's IAM role. The bucket must exist: it is checked
// here, so a typo fails at start, not at the first snapshot.
func NewS3Backend(ctx context.Context, bucket, prefix string, getenv func(string) string) (*S3Backend, error) {
	if bucket == "" {
		return nil, errors.New("snapshot store: s3:// needs a bucket: s3://bucket/prefix")
	}
	endpoint := cmp.Or(getenv("AWS_ENDPOINT_URL_S3"), getenv("AWS_ENDPOINT_URL"), "https://s3.amazonaws.com")
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("snapshot store: endpoint %q: want http(s)://host[:port]", endpoint)
	}
	var creds *credentials.Credentials
	if id := getenv("AWS_ACCESS_KEY_ID"); id != "" {
		creds = credentials.NewStaticV4(id, getenv("AWS_SECRET_ACCESS_KEY"), getenv("AWS_SESSION_TOKEN"))
	} else {
		creds = credentials.NewIAM("")
	}
	lookup := minio.BucketLookupAuto
	if u.Host != "s3.amazonaws.com" {
		lookup = minio.BucketLookupPath
	}
	c, err := minio.New(u.Host, &minio.Options{Creds: creds, Secure: u.Scheme == "https",
		Region: cmp.Or(getenv("AWS_REGION"), getenv("AWS_DEFAULT_REGION")), BucketLookup: lookup})
	if err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	if prefix != "" {
		if err := validKey(prefix); err != nil {
			return nil, err
		}
		prefix += "/"
	}
	b := &S3Backend{c: c, bucket: bucket, prefix: prefix, where: "s3://" + bucket + "/" + prefix + " at " + u.Scheme + "://" + u.Host}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ok, err := c.BucketExists(cctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("snapshot store %s: %w (check AWS_ENDPOINT_URL and the credentials)", b.where, err)
	}
	if !ok {
		return nil, fmt.Errorf("snapshot store %s: bucket %q does not exist: create it first", b.where, bucket)
	}
	return b, nil
}

func (b *S3Backend) String() string { return b.where }

func (b *S3Backend) key(key string) (string, error) {
	if err := validKey(key); err != nil {
		return "", err
	}
	return b.prefix + key, nil
}

func notFound(err error) bool {
	code := minio.ToErrorResponse(err).Code
	return code == "NoSuchKey" || code == "NotFound"
}

// putPart is the size of an upload's parts, and the largest object sent in one PUT.
const putPart = 64 << 20

func (b *S3Backend) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	k, err := b.key(key)
	if err != nil {
		return err
	}
	// Parts of 64 MiB: a pack (about 16 MiB) is one PUT, not a multipart upload of
	// four requests; a larger object is as few parts as S3 allows without buffering
	// much (an *os.File or a bytes.Reader is read in place, through io.ReaderAt).
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", PartSize: putPart}
	if _, err := b.c.PutObject(ctx, b.bucket, k, r, size, opts); err != nil {
		return fmt.Errorf("snapshot store: put %s: %w", key, err)
	}
	return nil
}

func (b *S3Backend) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return b.open(ctx, key, minio.GetObjectOptions{}, -1)
}

func (b *S3Backend) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if off < 0 || n <= 0 {
		return nil, fmt.Errorf("snapshot store: get %s: bad range %d+%d", key, off, n)
	}
	var opts minio.GetObjectOptions
	if err := opts.SetRange(off, off+n-1); err != nil {
		return nil, err
	}
	return b.open(ctx, key, opts, n)
}

// open GETs key (n bytes of it, or all: -1). GetObject is lazy, and its Stat is a HEAD
// of its own: the first read is what sends the GET and says whether key exists, so it
// is read here, once.
func (b *S3Backend) open(ctx context.Context, key string, opts minio.GetObjectOptions, n int64) (io.ReadCloser, error) {
	k, err := b.key(key)
	if err != nil {
		return nil, err
	}
	o, err := b.c.GetObject(ctx, b.bucket, k, opts)
	if err != nil {
		return nil, err
	}
	first := make([]byte, 32<<10)
	if n >= 0 && n < int64(len(first)) {
		first = first[:n]
	}
	got, err := io.ReadFull(o, first)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		o.Close()
		if notFound(err) {
			return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
		}
		return nil, fmt.Errorf("snapshot store: get %s: %w", key, err)
	}
	if n >= 0 {
		if err != nil {
			o.Close()
			return nil, fmt.Errorf("snapshot store: get %s: range past its end", key)
		}
		return struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(first[:got]), io.LimitReader(o, n-int64(got))), o}, nil
	}
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(first[:got]), o), o}, nil
}

func (b *S3Backend) Exists(ctx context.Context, key string) (bool, error) {
	k, err := b.key(key)
	if err != nil {
		return false, err
	}
	_, err = b.c.StatObject(ctx, b.bucket, k, minio.StatObjectOptions{})
	if err != nil {
		if notFound(err) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// Touch copies the object onto itself with a fresh metadata stamp: S3 has no other way
// to renew an object's modification time, and the copy moves no data out of the store.
func (b *S3Backend) Touch(ctx context.Context, key string) error {
	k, err := b.key(key)
	if err != nil {
		return err
	}
	_, err = b.c.CopyObject(ctx,
		minio.CopyDestOptions{Bucket: b.bucket, Object: k, ReplaceMetadata: true,
			UserMetadata: map[string]string{"cws-touched": time.Now().UTC().Format(time.RFC3339Nano)}},
		minio.CopySrcOptions{Bucket: b.bucket, Object: k})
	if err != nil && notFound(err) {
		return fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	return err
}

func (b *S3Backend) Delete(ctx context.Context, key string) error {
	k, err := b.key(key)
	if err != nil {
		return err
	}
	if err := b.c.RemoveObject(ctx, b.bucket, k, minio.RemoveObjectOptions{}); err != nil && !notFound(err) {
		return err
	}
	return nil
}

func (b *S3Backend) List(ctx context.Context, prefix string, fn func(Object) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the listing goroutine when fn ends it early
	for o := range b.c.ListObjects(ctx, b.bucket, minio.ListObjectsOptions{Prefix: b.prefix + prefix, Recursive: true}) {
		if o.Err != nil {
			return o.Err
		}
		if err := fn(Object{Key: strings.TrimPrefix(o.Key, b.prefix), Size: o.Size, Modified: o.LastModified}); err != nil {
			return err
		}
	}
	return nil
}
