package s3proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/cwsdev/cws/internal/testenv"
)

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		method, target string
		header         map[string]string
		want           Kind
	}{
		{"PUT", "/b/k", nil, Put},
		{"PUT", "/b/dir/k%20x?partNumber=2&uploadId=u", nil, Put},
		{"PUT", "/b/k", map[string]string{"X-Amz-Copy-Source": "/b/old"}, Copy},
		{"PUT", "/b/k?tagging", nil, Other},
		{"PUT", "/b", nil, Other},
		{"PUT", "/b/", nil, Other},
		{"GET", "/b/k", nil, Get},
		{"GET", "/b/k", map[string]string{"Range": "bytes=0-9"}, Get},
		{"GET", "/b/k?versionId=3", nil, Get},
		{"GET", "/b/k?X-Amz-Signature=abc&X-Amz-Date=x", nil, Get}, // presigned
		{"GET", "/b/k?acl", nil, Other},
		{"GET", "/b/k?uploadId=u", nil, Other}, // a multipart upload's parts
		{"GET", "/b?list-type=2&prefix=t/", nil, List},
		{"GET", "/b/?delimiter=/", nil, List},
		{"GET", "/b", nil, List},
		{"GET", "/", nil, List},
		{"GET", "/b?location", nil, Other},
		{"HEAD", "/b/k", nil, Head},
		{"HEAD", "/b", nil, Head},
		{"DELETE", "/b/k", nil, Delete},
		{"DELETE", "/b/k?uploadId=u", nil, Other},
		{"DELETE", "/b", nil, Other},
		{"POST", "/b?delete", nil, Delete},
		{"POST", "/b/k?uploads", nil, Other},
		{"POST", "/b/k?uploadId=u", nil, Other},
		{"OPTIONS", "/b/k", nil, Other},
	} {
		r := httptest.NewRequest(c.method, c.target, nil)
		for k, v := range c.header {
			r.Header.Set(k, v)
		}
		if got := Classify(r); got != c.want {
			t.Errorf("%s %s %v: %v, want %v", c.method, c.target, c.header, got, c.want)
		}
	}
}

func TestNewRejectsBadTargets(t *testing.T) {
	for _, target := range []string{"", "127.0.0.1:8333", "ftp://h:1", "http://", "http://h:1/prefix", "::"} {
		if _, err := New(target); err == nil || !strings.Contains(err.Error(), "want http(s)://host[:port]") {
			t.Errorf("New(%q) = %v, want an error naming the form", target, err)
		}
	}
}

func TestCountsArithmetic(t *testing.T) {
	a := Counts{Put: 5, Get: 4, Head: 3, List: 2, Delete: 1, Copy: 1, Other: 1, Ranged: 2, Bytes: 100}
	b := Counts{Put: 2, Get: 1, Head: 1, Ranged: 1, Bytes: 40}
	d := a.Sub(b)
	if d != (Counts{Put: 3, Get: 3, Head: 2, List: 2, Delete: 1, Copy: 1, Other: 1, Ranged: 1, Bytes: 60}) {
		t.Errorf("Sub = %+v", d)
	}
	if d.Total() != 13 {
		t.Errorf("Total = %d, want 13", d.Total())
	}
	if s := d.String(); s != "PUT 3, GET 3 (1 ranged), HEAD 2, LIST 2, DELETE 1, COPY 1, other 1" {
		t.Errorf("String = %q", s)
	}
	if s := (Counts{}).String(); s != "no requests" {
		t.Errorf("String of none = %q", s)
	}
}

// seen is one request as the server behind the proxy received it.
type seen struct {
	method, uri, host string
	header            http.Header
	body              []byte
}

// recorder is a server that keeps what it receives and answers with answer.
func recorder(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) (*httptest.Server, func() []seen) {
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read the body: %v", err)
		}
		mu.Lock()
		got = append(got, seen{r.Method, r.RequestURI, r.Host, r.Header.Clone(), b})
		mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []seen { mu.Lock(); defer mu.Unlock(); return append([]seen(nil), got...) }
}

func start(t *testing.T, target string) *Server {
	t.Helper()
	s, err := Start(target, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// TestPassesThroughByteForByte: a signed PUT and a ranged GET reach the server with
// their method, path and query as sent, every header (Host, Authorization, Range,
// x-amz-*) and the body unchanged, and the answer comes back the same way.
func TestPassesThroughByteForByte(t *testing.T) {
	object := random(1 << 20)
	srv, received := recorder(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			w.Header().Set("ETag", `"put-etag"`)
			return
		}
		w.Header().Set("Content-Range", "bytes 100-65635/1048576")
		w.Header().Set("ETag", `"e1"`)
		w.Header().Set("X-Amz-Request-Id", "r-1")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", "65536")
		w.WriteHeader(http.StatusPartialContent)
		_, _ = w.Write(object[100:65636])
	})
	p := start(t, srv.URL)
	host := strings.TrimPrefix(p.URL, "http://")
	signed := map[string]string{
		"Authorization":        "AWS4-HMAC-SHA256 Credential=k/20260101/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=0123abcd",
		"X-Amz-Date":           "20260101T000000Z",
		"X-Amz-Content-Sha256": "UNSIGNED-PAYLOAD",
		"X-Amz-Meta-Note":      "a b+c",
		"Content-Md5":          "1B2M2Y8AsgTpgAmY7PhCfg==",
		"User-Agent":           "MinIO (linux; amd64) minio-go/v7.4.1",
	}
	target := "/bucket/t/blobs/ab/a%20b+c%2Fd?x-id=PutObject&tag=%C3%A9"

	put, _ := http.NewRequest(http.MethodPut, p.URL+target, bytes.NewReader(object))
	for k, v := range signed {
		put.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(put)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") != `"put-etag"` {
		t.Errorf("PUT answered %d, ETag %q", resp.StatusCode, resp.Header.Get("ETag"))
	}

	get, _ := http.NewRequest(http.MethodGet, p.URL+"/bucket/t/blobs/ab/a%20b+c%2Fd", nil)
	for k, v := range signed {
		get.Header.Set(k, v)
	}
	get.Header.Set("Range", "bytes=100-65635")
	resp, err = http.DefaultClient.Do(get)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, object[100:65636]) {
		t.Errorf("ranged GET answered %d with %d bytes, want 206 with the range's 65536", resp.StatusCode, len(body))
	}
	for k, want := range map[string]string{"Content-Range": "bytes 100-65635/1048576", "ETag": `"e1"`, "X-Amz-Request-Id": "r-1", "Content-Length": "65536"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("the answer's %s = %q, want %q", k, got, want)
		}
	}

	got := received()
	if len(got) != 2 {
		t.Fatalf("the server received %d requests, want 2", len(got))
	}
	for i, want := range []struct {
		method, uri string
		body        []byte
		extra       map[string]string
	}{
		{http.MethodPut, target, object, map[string]string{"Content-Length": "1048576"}},
		{http.MethodGet, "/bucket/t/blobs/ab/a%20b+c%2Fd", nil, map[string]string{"Range": "bytes=100-65635"}},
	} {
		g := got[i]
		if g.method != want.method || g.uri != want.uri || g.host != host {
			t.Errorf("request %d reached the server as %s %s (Host %s), want %s %s (Host %s)", i, g.method, g.uri, g.host, want.method, want.uri, host)
		}
		if !bytes.Equal(g.body, want.body) {
			t.Errorf("request %d: the server got a %d-byte body, want the %d bytes sent", i, len(g.body), len(want.body))
		}
		for k, v := range signed {
			if g.header.Get(k) != v {
				t.Errorf("request %d: header %s = %q at the server, want %q", i, k, g.header.Get(k), v)
			}
		}
		for k, v := range want.extra {
			if g.header.Get(k) != v {
				t.Errorf("request %d: header %s = %q at the server, want %q", i, k, g.header.Get(k), v)
			}
		}
		for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Host", "Forwarded"} {
			if g.header.Get(k) != "" {
				t.Errorf("request %d: the proxy added %s: %q", i, k, g.header.Get(k))
			}
		}
	}
	c := p.Counts()
	if c.Put != 1 || c.Get != 1 || c.Ranged != 1 || c.Total() != 2 || c.Bytes != 65536 {
		t.Errorf("counts = %+v, want one PUT and one ranged GET of 65536 bytes", c)
	}
}

// TestDelayEveryRequest: with a delay set, every request waits at least that long
// before it reaches the server; SetDelay(0) takes it off.
func TestDelayEveryRequest(t *testing.T) {
	var mu sync.Mutex
	var arrived []time.Time
	srv, _ := recorder(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived = append(arrived, time.Now())
		mu.Unlock()
	})
	p := start(t, srv.URL)
	const delay = 40 * time.Millisecond
	p.SetDelay(delay)
	if p.Delay() != delay {
		t.Fatalf("Delay = %v after SetDelay(%v)", p.Delay(), delay)
	}
	for i := range 3 {
		mu.Lock()
		before := len(arrived)
		mu.Unlock()
		sent := time.Now()
		resp, err := http.Head(p.URL + "/b/k")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		mu.Lock()
		if len(arrived) != before+1 {
			t.Fatalf("request %d: the server saw %d requests, want %d", i, len(arrived), before+1)
		}
		if waited := arrived[before].Sub(sent); waited < delay {
			t.Errorf("request %d reached the server after %v, want at least the delay %v", i, waited, delay)
		}
		mu.Unlock()
	}
	p.SetDelay(-time.Second)
	if p.Delay() != 0 {
		t.Errorf("a negative delay = %v, want none", p.Delay())
	}
	if c := p.Counts(); c.Head != 3 || c.Total() != 3 {
		t.Errorf("counts = %+v, want 3 HEADs", c)
	}
}

// TestDelayEndsWithTheClient: a request whose client gives up during the delay never
// reaches the server.
func TestDelayEndsWithTheClient(t *testing.T) {
	srv, received := recorder(t, func(w http.ResponseWriter, r *http.Request) {})
	p := start(t, srv.URL)
	p.SetDelay(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/b/k", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("a request held for an hour answered")
	}
	p.SetDelay(0)
	resp, err := http.Get(p.URL + "/b/k2") // the proxy still serves
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := received(); len(got) != 1 || got[0].uri != "/b/k2" {
		t.Errorf("the server received %v, want only the second request", got)
	}
}

// TestSignedRequestsToS3: minio-go's SigV4-signed requests through the proxy to a
// real S3 server (SeaweedFS) verify and work, and each is counted as its kind.
func TestSignedRequestsToS3(t *testing.T) {
	srv, bucket := testenv.S3(t)
	p := start(t, srv.Endpoint)
	c, err := minio.New(strings.TrimPrefix(p.URL, "http://"), &minio.Options{Region: "us-east-1",
		Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	object := random(300 << 10)
	step := func(what string, want Counts, fn func() error) {
		t.Helper()
		before := p.Counts()
		if err := fn(); err != nil {
			t.Fatalf("%s through the proxy: %v", what, err)
		}
		got := p.Counts().Sub(before)
		got.Bytes = 0
		if got != want {
			t.Errorf("%s counted as %v, want %v", what, got, want)
		}
	}
	step("BucketExists", Counts{Head: 1}, func() error {
		ok, err := c.BucketExists(ctx, bucket)
		if err == nil && !ok {
			t.Error("the bucket is not there through the proxy")
		}
		return err
	})
	step("PutObject", Counts{Put: 1}, func() error {
		_, err := c.PutObject(ctx, bucket, "t/blobs/ab/one two", bytes.NewReader(object), int64(len(object)), minio.PutObjectOptions{})
		return err
	})
	step("GetObject", Counts{Get: 1}, func() error {
		o, err := c.GetObject(ctx, bucket, "t/blobs/ab/one two", minio.GetObjectOptions{})
		if err != nil {
			return err
		}
		defer o.Close()
		b, err := io.ReadAll(o)
		if err == nil && !bytes.Equal(b, object) {
			t.Errorf("GetObject gave %d bytes, not the object's %d", len(b), len(object))
		}
		return err
	})
	step("a ranged GetObject", Counts{Get: 1, Ranged: 1}, func() error {
		opts := minio.GetObjectOptions{}
		if err := opts.SetRange(1000, 70999); err != nil {
			return err
		}
		o, err := c.GetObject(ctx, bucket, "t/blobs/ab/one two", opts)
		if err != nil {
			return err
		}
		defer o.Close()
		b, err := io.ReadAll(o)
		if err == nil && !bytes.Equal(b, object[1000:71000]) {
			t.Errorf("the ranged GetObject gave %d bytes, not the range's 70000", len(b))
		}
		return err
	})
	step("StatObject", Counts{Head: 1}, func() error {
		_, err := c.StatObject(ctx, bucket, "t/blobs/ab/one two", minio.StatObjectOptions{})
		return err
	})
	step("CopyObject", Counts{Copy: 1}, func() error {
		_, err := c.CopyObject(ctx, minio.CopyDestOptions{Bucket: bucket, Object: "t/copy"}, minio.CopySrcOptions{Bucket: bucket, Object: "t/blobs/ab/one two"})
		return err
	})
	step("ListObjects", Counts{List: 1}, func() error {
		var keys []string
		for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: "t/", Recursive: true}) {
			if o.Err != nil {
				return o.Err
			}
			keys = append(keys, o.Key)
		}
		if strings.Join(keys, ",") != "t/blobs/ab/one two,t/copy" {
			t.Errorf("listed %q", keys)
		}
		return nil
	})
	step("RemoveObject", Counts{Delete: 1}, func() error {
		return c.RemoveObject(ctx, bucket, "t/copy", minio.RemoveObjectOptions{})
	})

	// A request signed for another host is refused by the server: the proxy passes the
	// Host the client signed, not its own.
	u, _ := url.Parse(srv.Endpoint)
	other, err := minio.New(u.Host, &minio.Options{Region: "us-east-1",
		Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	signedElsewhere, err := other.PresignedGetObject(ctx, bucket, "t/blobs/ab/one two", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(p.URL + signedElsewhere.RequestURI())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a URL signed for %s, through the proxy: %d, want 403 (the proxy must not rewrite Host)", u.Host, resp.StatusCode)
	}
}

// TestServerGone: a request the server can't be reached for answers 502, counted.
func TestServerGone(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	target := srv.URL
	srv.Close()
	p := start(t, target)
	resp, err := http.Get(p.URL + "/b/k")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("a request to a server that is gone: %d, want 502", resp.StatusCode)
	}
	if c := p.Counts(); c.Get != 1 {
		t.Errorf("counts = %+v, want the GET counted", c)
	}
}
