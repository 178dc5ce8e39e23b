package snapshot

import (
	"bytes"
	mrand "math/rand/v2"
	"net/http/httptest"
	"testing"

	"github.com/cwsdev/cws/internal/s3proxy"
	"github.com/cwsdev/cws/internal/testenv"
)

// TestS3RequestsOnTheWire counts the HTTP requests a real S3 server sees (through a
// counting proxy, multipart uploads' parts and their begin and end included): writing
// a tree of B bytes in many files takes at most B / 8 MiB + 10 requests that write,
// and reading it back as many GETs.
func TestS3RequestsOnTheWire(t *testing.T) {
	srv, bucket := testenv.S3(t)
	p, err := s3proxy.New(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	defer front.Close()
	env := srv.Env()
	env["AWS_ENDPOINT_URL"] = front.URL
	b, err := Open(t.Context(), "s3://"+bucket+"/wire", func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(b)
	rng := mrand.New(mrand.NewPCG(7, 7))
	stream, want, total := genTree(t, rng, 3000, true)
	before := p.Counts()
	snap, err := s.Write(t.Context(), Snapshot{ID: NewID(), Tenant: "acme", Kind: KindArchive}, bytes.NewReader(stream), 0)
	if err != nil {
		t.Fatal(err)
	}
	wrote := p.Counts().Sub(before)
	var out bytes.Buffer
	before = p.Counts()
	if _, err := s.Read(t.Context(), "acme", snap.ID, &out); err != nil {
		t.Fatal(err)
	}
	read := p.Counts().Sub(before)
	sameTree(t, readTree(t, &out), want)
	budget := total/(8<<20) + 10
	t.Logf("%d entries, %d bytes: write %v; read %v; budget %d", len(want), total, wrote, read, budget)
	if n := wrote.Put + wrote.Copy + wrote.Other; n > budget {
		t.Errorf("writing %d bytes took %d requests that write (%v); want at most %d", total, n, wrote, budget)
	}
	// One request per pack (never a multipart upload's several), and the lease, the
	// index, the entries and the record.
	packs, _ := packs(t, b, "acme")
	if n := wrote.Put + wrote.Copy + wrote.Other; n > int64(packs)+4 {
		t.Errorf("%d packs took %d requests that write (%v); want one each, and 4 more", packs, n, wrote)
	}
	if read.Get > budget {
		t.Errorf("reading %d bytes took %d GETs; want at most %d", total, read.Get, budget)
	}
}
