// Package s3proxy is an HTTP proxy in front of an S3 server that counts the requests
// going through it by kind (PUT, GET, HEAD, LIST, DELETE, COPY, other) and can hold
// each one for a fixed delay, as a real region's latency would. cmd/cws-bench puts it
// between the snapshot store and SeaweedFS to show what an archive costs in requests.
//
// Requests and responses pass through unchanged: method, path, query, headers (Host
// included, so that SigV4 signatures made for the proxy's address still verify) and
// bodies, byte for byte. It understands path-style addressing only (/bucket/key), the
// style the snapshot store uses for any endpoint but AWS's.
package s3proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// Kind is what an S3 request does, as S3 prices and counts it.
type Kind int

// The kinds of request.
const (
	Put    Kind = iota // PUT of an object or of one part of a multipart upload
	Get                // GET of an object, whole or a byte range
	Head               // HEAD of an object or a bucket
	List               // GET of a bucket's listing (or of the buckets)
	Delete             // DELETE of an object, or a multi-object delete (POST ?delete)
	Copy               // PUT with x-amz-copy-source (a server-side copy)
	Other              // everything else: bucket settings, multipart begin/end, …
	kinds
)

var kindNames = [kinds]string{"PUT", "GET", "HEAD", "LIST", "DELETE", "COPY", "other"}

func (k Kind) String() string {
	if k < 0 || k >= kinds {
		return fmt.Sprintf("Kind(%d)", int(k))
	}
	return kindNames[k]
}

// Counts is how many requests of each kind went through; Ranged is the GETs of them
// that asked for a byte range (a Range header), and Bytes the response bytes the
// proxy passed back, e.g. to show how much a restore downloaded.
type Counts struct {
	Put, Get, Head, List, Delete, Copy, Other int64
	Ranged                                    int64
	Bytes                                     int64
}

// Sub returns c minus before: what went through between two readings.
func (c Counts) Sub(before Counts) Counts {
	return Counts{Put: c.Put - before.Put, Get: c.Get - before.Get, Head: c.Head - before.Head,
		List: c.List - before.List, Delete: c.Delete - before.Delete, Copy: c.Copy - before.Copy,
		Other: c.Other - before.Other, Ranged: c.Ranged - before.Ranged, Bytes: c.Bytes - before.Bytes}
}

// Total is the number of requests of every kind.
func (c Counts) Total() int64 {
	return c.Put + c.Get + c.Head + c.List + c.Delete + c.Copy + c.Other
}

// String lists the kinds that had requests, e.g. "PUT 12, GET 3 (1 ranged), HEAD 2".
func (c Counts) String() string {
	var parts []string
	for k, n := range [kinds]int64{c.Put, c.Get, c.Head, c.List, c.Delete, c.Copy, c.Other} {
		if n == 0 {
			continue
		}
		s := fmt.Sprintf("%s %d", Kind(k), n)
		if Kind(k) == Get && c.Ranged > 0 {
			s += fmt.Sprintf(" (%d ranged)", c.Ranged)
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "no requests"
	}
	return strings.Join(parts, ", ")
}

// Proxy forwards every request to one S3 server. It is an http.Handler; Start serves it
// on a loopback port. It is safe for concurrent use.
type Proxy struct {
	rp     *httputil.ReverseProxy
	delay  atomic.Int64 // nanoseconds
	counts [kinds]atomic.Int64
	ranged atomic.Int64
	bytes  atomic.Int64
}

// New returns a proxy to the S3 server at target (http://host:port).
func New(target string) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("s3proxy: target %q: want http(s)://host[:port]", target)
	}
	p := &Proxy{}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = u.Scheme, u.Host
			r.Out.Host = r.In.Host // what the client signed
		},
		// Many small requests at once: keep their connections to the server.
		Transport: &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute},
		FlushInterval: -1, // stream bodies as they come
		// The client sees the failure; a bench's log needs no line per request.
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) { w.WriteHeader(http.StatusBadGateway) },
		ModifyResponse: func(resp *http.Response) error {
			if resp.Body != nil && resp.Body != http.NoBody {
				resp.Body = &countingBody{ReadCloser: resp.Body, n: &p.bytes}
			}
			return nil
		},
	}
	return p, nil
}

// SetDelay holds every later request for d before it is forwarded (0: none).
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(max(d, 0))) }

// Delay is the delay SetDelay set.
func (p *Proxy) Delay() time.Duration { return time.Duration(p.delay.Load()) }

// Counts returns the requests counted so far.
func (p *Proxy) Counts() Counts {
	return Counts{Put: p.counts[Put].Load(), Get: p.counts[Get].Load(), Head: p.counts[Head].Load(),
		List: p.counts[List].Load(), Delete: p.counts[Delete].Load(), Copy: p.counts[Copy].Load(),
		Other: p.counts[Other].Load(), Ranged: p.ranged.Load(), Bytes: p.bytes.Load()}
}

// ServeHTTP counts r, waits the delay, and forwards it.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k := Classify(r)
	p.counts[k].Add(1)
	if k == Get && r.Header.Get("Range") != "" {
		p.ranged.Add(1)
	}
	if d := p.Delay(); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return // the client is gone: nothing to answer
		}
	}
	p.rp.ServeHTTP(w, r)
}

// Classify says what kind of S3 request r is, for path-style addressing.
func Classify(r *http.Request) Kind {
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	q := r.URL.Query()
	object := bucket != "" && key != ""
	switch r.Method {
	case http.MethodHead:
		return Head
	case http.MethodPut:
		switch {
		case !object:
			return Other // a bucket, or its settings
		case r.Header.Get("X-Amz-Copy-Source") != "":
			return Copy // a copy, or a part copied from another object
		case has(q, objectSettings...):
			return Other
		}
		return Put
	case http.MethodGet:
		if !object {
			if bucket == "" || len(q) == 0 || has(q, listParams...) {
				return List
			}
			return Other // ?location, ?versioning, …
		}
		if has(q, objectSettings...) || q.Has("uploadId") { // settings, a multipart upload's parts
			return Other
		}
		return Get
	case http.MethodDelete:
		if object && !q.Has("uploadId") && !has(q, objectSettings...) {
			return Delete
		}
		return Other // a bucket, an aborted upload, a setting
	case http.MethodPost:
		if q.Has("delete") {
			return Delete
		}
	}
	return Other
}

// objectSettings are the sub-resources of an object that are not its bytes.
var objectSettings = []string{"acl", "tagging", "attributes", "retention", "legal-hold", "torrent", "restore", "select", "uploads"}

// listParams are the query parameters of a bucket listing.
var listParams = []string{"list-type", "prefix", "delimiter", "marker", "continuation-token", "start-after", "max-keys",
	"encoding-type", "fetch-owner", "versions", "uploads"}

func has(q url.Values, names ...string) bool {
	for _, n := range names {
		if q.Has(n) {
			return true
		}
	}
	return false
}

// countingBody adds what is read through it to n.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// Server is a Proxy served on a loopback port.
type Server struct {
	*Proxy
	URL string // http://127.0.0.1:PORT
	srv *http.Server
}

// Start serves a proxy to target on a free port of addr's host ("127.0.0.1:0" for
// loopback; a host the caller's clients can reach otherwise).
func Start(target, addr string) (*Server, error) {
	p, err := New(target)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("s3proxy: %w", err)
	}
	s := &Server{Proxy: p, URL: "http://" + l.Addr().String(), srv: &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

// Close stops serving and ends the connections.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		return s.srv.Close()
	}
	return nil
}
