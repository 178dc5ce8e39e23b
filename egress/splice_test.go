package egress

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// tcpPair is a connected loopback TCP pair.
func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-ch
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// TestRelay: whatever the size, the bytes already buffered, the limit and the kind of
// the two ends (sockets: spliced; else copied), relay moves exactly the bytes it
// should, in order, leaves what follows the limit unread, and says how many it moved.
// It runs alone (no t.Parallel, here or in its subtests), so that the package's splice
// counter moves only for the subtest that checks it.
func TestRelay(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 4))
	sizes := []int{0, 1, 7, 4095, 65536, spliceChunk - 1, spliceChunk, spliceChunk + 1, 3*spliceChunk + 12345}
	for range 6 {
		sizes = append(sizes, rng.IntN(4*spliceChunk))
	}
	for i, size := range sizes {
		for _, kind := range []string{"sockets", "pipe"} {
			for _, limited := range []bool{false, true} {
				t.Run(fmt.Sprintf("%d/%s/limited=%v", size, kind, limited), func(t *testing.T) {
					data := make([]byte, size)
					fill := rand.New(rand.NewPCG(uint64(i), uint64(size))) // one per subtest: they run in parallel
					for j := range data {
						data[j] = byte(fill.Uint32())
					}
					before := spliced.Load()
					trailer := []byte("NEXT") // what follows a limited body: must stay unread
					// src: what the writer side sends; the relay reads it through br.
					srcW, srcR := tcpPair(t)
					var dst net.Conn
					var out net.Conn
					if kind == "sockets" {
						dst, out = tcpPair(t)
					} else {
						dst, out = net.Pipe()
						t.Cleanup(func() { dst.Close(); out.Close() })
					}
					go func() {
						_, _ = srcW.Write(data)
						if limited {
							_, _ = srcW.Write(trailer)
						} else {
							_ = srcW.CloseWrite()
						}
					}()
					br := bufio.NewReaderSize(srcR, 4096)
					if size > 0 && i%2 == 0 {
						_, _ = br.Peek(min(size, 1+i*97%4096)) // some bytes read ahead into br
					}
					got := make(chan []byte, 1)
					go func() {
						b, _ := io.ReadAll(out)
						got <- b
					}()
					var last atomic.Int64
					limit := int64(-1)
					if limited {
						limit = int64(size)
					}
					n, err := relay(dst, br, srcR, limit, &last)
					if err != nil {
						t.Fatalf("relay: %d bytes, %v", n, err)
					}
					dst.Close()
					b := <-got
					if n != int64(size) || !bytes.Equal(b, data) {
						t.Fatalf("relay moved %d (said %d) of %d bytes, equal %v", len(b), n, size, bytes.Equal(b, data))
					}
					if size > 0 && last.Load() == 0 {
						t.Error("relay moved bytes without touching last")
					}
					if kind == "sockets" && size > 4096 && spliced.Load() == before {
						t.Error("between two sockets, relay copied instead of splicing")
					}
					if limited {
						rest := make([]byte, len(trailer))
						_ = srcR.SetReadDeadline(time.Now().Add(5 * time.Second))
						if _, err := io.ReadFull(br, rest); err != nil || !bytes.Equal(rest, trailer) {
							t.Fatalf("what follows the limit: %q, %v", rest, err)
						}
					}
				})
			}
		}
	}
}

// TestRelayShortSource: a source that ends before the limit is an error, whatever the
// ends.
func TestRelayShortSource(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sockets", "pipe"} {
		srcW, srcR := tcpPair(t)
		var dst, out net.Conn
		if kind == "sockets" {
			dst, out = tcpPair(t)
		} else {
			dst, out = net.Pipe()
			defer dst.Close()
		}
		go func() { _, _ = io.Copy(io.Discard, out) }()
		go func() { _, _ = srcW.Write(make([]byte, 1000)); srcW.Close() }()
		var last atomic.Int64
		n, err := relay(dst, nil, srcR, 5000, &last)
		if n != 1000 || err != io.ErrUnexpectedEOF {
			t.Errorf("%s: relay of a 1,000-byte source with limit 5,000: %d, %v; want 1000, unexpected EOF", kind, n, err)
		}
	}
}

// scriptedOrigin is a raw HTTP/1.1 server on 127.0.0.1 that answers each request on a
// connection with what answer returns for its path (the whole response, head and
// body, as bytes), keeping the connection. It counts connections.
func scriptedOrigin(t *testing.T, answer func(req *http.Request) []byte) (port int, conns *atomic.Int64) {
	t.Helper()
	return rawOrigin(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			b := answer(req)
			if b == nil {
				return
			}
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	})
}

// rawOrigin is a TCP server on 127.0.0.1 that hands each connection (closed after) to
// serve, with a reader of it; it counts connections.
func rawOrigin(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) (port int, conns *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	conns = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				serve(c, bufio.NewReader(c))
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, conns
}

// TestServePlainHTTPKeepAliveBodies: one client connection, one upstream, many
// answers of every kind in turn (sized bodies from empty to several MiB, a status
// with no reason, chunked, an answer to HEAD): each reaches the client whole and
// exact, with its header as the origin sent it, and the next request still works.
func TestServePlainHTTPKeepAliveBodies(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 31))
	bodies := map[string][]byte{}
	var paths []string
	for i, size := range []int{0, 1, 100, 70000, spliceChunk + 3, 3 << 20, rng.IntN(2 << 20)} {
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		p := fmt.Sprintf("/sized%d", i)
		bodies[p] = b
		paths = append(paths, p, "/chunked", "/noreason", "/head")
	}
	port, conns := scriptedOrigin(t, func(req *http.Request) []byte {
		var h bytes.Buffer
		switch p := req.URL.Path; {
		case strings.HasPrefix(p, "/sized"):
			fmt.Fprintf(&h, "HTTP/1.1 200 OK\r\nX-Path: %s\r\nX-Twice: a\r\nX-Twice: b\r\nContent-Length: %d\r\n\r\n", p, len(bodies[p]))
			h.Write(bodies[p])
		case p == "/chunked":
			h.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
		case p == "/noreason":
			h.WriteString("HTTP/1.1 299 \r\nContent-Length: 3\r\n\r\nodd")
		case p == "/head":
			h.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 12345\r\n\r\n")
		}
		return h.Bytes()
	})
	hp := net.JoinHostPort("allowed.test", strconv.Itoa(port))
	p, rec := newPx()
	c := dialPx(t, p, "s1", listed(pxRules(t), 0))
	br := bufio.NewReader(c)
	for _, path := range paths {
		method := "GET"
		if path == "/head" {
			method = "HEAD"
		}
		write(t, c, method+" http://"+hp+path+" HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s %s: body: %v", method, path, err)
		}
		switch {
		case strings.HasPrefix(path, "/sized"):
			if resp.StatusCode != 200 || resp.Header.Get("X-Path") != path || strings.Join(resp.Header.Values("X-Twice"), ",") != "a,b" {
				t.Errorf("%s: %d %v", path, resp.StatusCode, resp.Header)
			}
			if !bytes.Equal(body, bodies[path]) {
				t.Fatalf("%s: %d bytes of %d, equal %v", path, len(body), len(bodies[path]), bytes.Equal(body, bodies[path]))
			}
		case path == "/chunked":
			if string(body) != "hello world" {
				t.Fatalf("chunked: %q", body)
			}
		case path == "/noreason":
			if resp.StatusCode != 299 || string(body) != "odd" {
				t.Fatalf("no reason: %d %q", resp.StatusCode, body)
			}
		case path == "/head":
			if resp.StatusCode != 200 || resp.ContentLength != 12345 || len(body) != 0 {
				t.Fatalf("HEAD: %d, length %d, %d body bytes", resp.StatusCode, resp.ContentLength, len(body))
			}
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("the origin saw %d connections for %d requests, want 1 (kept alive)", n, len(paths))
	}
	var in int64
	for _, r := range rec.all() {
		in += r.BytesIn
	}
	var want int64
	for _, b := range bodies {
		want += int64(len(b))
	}
	if in < want {
		t.Errorf("records count %d bytes in, less than the bodies' %d", in, want)
	}
}

// TestServeSizedConnectionClose: an origin's "Connection: close" reaches the client
// (http.ReadResponse takes it out of the header), which then knows not to send another
// request on the connection; the proxy ends it after the body. An HTTP/1.0 answer, and
// one followed by bytes nobody asked for, end it too, their bodies whole.
func TestServeSizedConnectionClose(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte("z"), 300000)
	for _, tc := range []struct {
		name   string
		answer string
	}{
		{"close", "HTTP/1.1 200 OK\r\nConnection: close\r\nX-Keep: yes\r\nContent-Length: 300000\r\n\r\n" + string(body)},
		{"close with other tokens", "HTTP/1.1 200 OK\r\nConnection: close, x-other\r\nContent-Length: 300000\r\n\r\n" + string(body)},
		{"http/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 300000\r\n\r\n" + string(body)},
		{"unasked bytes after", "HTTP/1.1 200 OK\r\nContent-Length: 300000\r\n\r\n" + string(body) + "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nsnek"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			port, conns := scriptedOrigin(t, func(*http.Request) []byte { return []byte(tc.answer) })
			hp := net.JoinHostPort("allowed.test", strconv.Itoa(port))
			p, _ := newPx()
			c := dialPx(t, p, "close", listed(pxRules(t), 0))
			br := bufio.NewReader(c)
			write(t, c, "GET http://"+hp+"/ HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("body: %d bytes of %d, %v", len(got), len(body), err)
			}
			if tc.name == "close" && resp.Header.Get("X-Keep") != "yes" {
				t.Errorf("header %v: the origin's X-Keep was lost", resp.Header)
			}
			if strings.HasPrefix(tc.name, "close") && !resp.Close {
				t.Errorf("the client was not told the connection closes (header %v)", resp.Header)
			}
			// A second request on the connection: it ends without another answer (a
			// kept upstream would have given the unasked bytes as this one's).
			write(t, c, "GET http://"+hp+"/again HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
			if resp, err := http.ReadResponse(br, nil); err == nil {
				b, _ := io.ReadAll(resp.Body)
				if tc.name == "unasked bytes after" && string(b) == "snek" {
					t.Fatalf("the bytes the origin sent unasked were given as the answer to the next request")
				}
				if tc.name != "unasked bytes after" {
					t.Fatalf("a second answer came on a connection that should have closed: %d %q", resp.StatusCode, b)
				}
				if n := conns.Load(); n < 2 {
					t.Errorf("the second request was answered on the same upstream (%d connections)", n)
				}
			}
		})
	}
}

// TestServeSizedBodyCut: an origin that closes before the body it announced is whole:
// the client gets what came, then the end of the connection (never a hang, never a
// kept connection that would take the next answer's bytes for this one's).
func TestServeSizedBodyCut(t *testing.T) {
	t.Parallel()
	port, _ := rawOrigin(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
		_, _ = c.Write(make([]byte, 40000))
	})
	hp := net.JoinHostPort("allowed.test", strconv.Itoa(port))
	p, rec := newPx()
	c := dialPx(t, p, "cut", listed(pxRules(t), 0))
	write(t, c, "GET http://"+hp+"/ HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
	if code, _ := readHead(t, c); code != 200 {
		t.Fatalf("status %d", code)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := io.Copy(io.Discard, c)
	if err != nil || n != 40000 {
		t.Fatalf("after the head: %d bytes, %v; want the 40,000 sent, then the end", n, err)
	}
	r := rec.wait(t, "the cut answer", func(r Record) bool { return r.Session == "cut" })
	if r.BytesIn < 40000 {
		t.Errorf("record %+v: BytesIn under the 40,000 body bytes moved", r)
	}
}

// TestServeSizedBodyStalls: an origin that stops sending mid-body is cut off after
// IdleTimeout, as a stalled tunnel is; one that trickles slower than the body's size
// but faster than IdleTimeout is not.
func TestServeSizedBodyStalls(t *testing.T) {
	t.Parallel()
	port, _ := rawOrigin(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
		if req.URL.Path == "/trickle" { // a byte every 100 ms: a second in all
			for range 10 {
				time.Sleep(100 * time.Millisecond)
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
			}
			time.Sleep(5 * time.Second)
			return
		}
		_, _ = io.WriteString(c, "xxx")
		time.Sleep(10 * time.Second)
	})
	hp := net.JoinHostPort("allowed.test", strconv.Itoa(port))
	p, _ := newPx()
	p.IdleTimeout = 300 * time.Millisecond

	c := dialPx(t, p, "stall", listed(pxRules(t), 0))
	write(t, c, "GET http://"+hp+"/stall HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
	if code, _ := readHead(t, c); code != 200 {
		t.Fatalf("status %d", code)
	}
	expectClosed(t, c, nil, 6*time.Second) // IdleTimeout is 300 ms; the origin stalls 10 s

	c = dialPx(t, p, "trickle", listed(pxRules(t), 0))
	write(t, c, "GET http://"+hp+"/trickle HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
	if code, _ := readHead(t, c); code != 200 {
		t.Fatalf("status %d", code)
	}
	got := make([]byte, 10)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "xxxxxxxxxx" {
		t.Fatalf("a trickled body (a byte per 100 ms, IdleTimeout 300 ms): %q, %v", got, err)
	}
}
