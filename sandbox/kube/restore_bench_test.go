package kube

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/version"
)

// BenchmarkTarIn: an archived wake's restore stream into a pod's agent over each
// transport, without the snapshot store: one 20 MB file (what the connection carries)
// and 2,000 files of 10 KB (what creating files costs on top), each replacing the
// whole workspace as a restore does. On the cluster `make kube` starts.
func BenchmarkTarIn(b *testing.B) {
	for _, tr := range []string{TransportDirect, TransportExec} {
		b.Run(tr, func(b *testing.B) {
			d := newTestDriver(b, Config{Transport: tr})
			info, err := d.Create(b.Context(), sandbox.Spec{Session: testSession(), Tenant: "acme", Image: version.TestImage})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = d.Remove(context.Background(), info.ID) })
			c := clientOf(d, info.ID)
			defer c.Close()
			ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
			defer cancel()
			if err := agent.WaitReady(ctx, d.dialer(info.ID), time.Minute); err != nil {
				b.Fatal(err)
			}
			for _, tc := range []struct {
				name        string
				files, size int
			}{{"1x20MB", 1, 20 << 20}, {"2000x10KB", 2000, 10 << 10}} {
				archive := treeTar(tc.files, tc.size)
				b.Run(tc.name, func(b *testing.B) {
					b.SetBytes(int64(tc.files * tc.size))
					for b.Loop() {
						res, err := c.TarIn(b.Context(), agent.TarInArgs{Path: ".", Exact: true}, bytes.NewReader(archive))
						if err != nil || res.Files != tc.files {
							b.Fatalf("tar.in = %+v %v, want %d files", res, err, tc.files)
						}
					}
				})
			}
		})
	}
}

// treeTar is a tar of files files of size random bytes, in 50 directories.
func treeTar(files, size int) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	content := make([]byte, size)
	for i := range files {
		_, _ = rand.Read(content)
		_ = tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%02d/f%05d.bin", i%50, i), Mode: 0o644, Size: int64(size), Typeflag: tar.TypeReg})
		_, _ = tw.Write(content)
	}
	_ = tw.Close()
	return buf.Bytes()
}
