package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
)

// UnpackForTests rewrites a tenant's snapshot id in the format of a cws before pack
// files: one object per blob, entries without places, and no pack or index left that
// holds its contents. It is for tests of stores an older cws wrote (an archive made
// before an upgrade must still wake), and never for a store in use: it removes every
// pack and index object of the tenant, unfenced, which breaks its other snapshots.
func (s *Store) UnpackForTests(ctx context.Context, tenant, id string) error {
	meta, err := s.Get(ctx, tenant, id)
	if err != nil {
		return err
	}
	es, err := s.entries(ctx, tenant, id)
	if err != nil {
		return err
	}
	var tarball bytes.Buffer
	if _, err := s.Read(ctx, tenant, id, &tarball); err != nil {
		return err
	}
	contents, err := contentsOf(&tarball)
	if err != nil {
		return err
	}
	for i := range es {
		e := &es[i]
		e.Pack, e.Off, e.Len = "", 0, 0
		if e.Blob == "" {
			continue
		}
		data, ok := contents[e.Blob]
		if !ok {
			return fmt.Errorf("unpack %s: contents %s not read back", id, e.Blob)
		}
		z := s.enc.EncodeAll(data, nil)
		if err := s.b.Put(ctx, blobKey(tenant, e.Blob), bytes.NewReader(z), int64(len(z))); err != nil {
			return err
		}
	}
	if _, _, err := s.finish(ctx, *meta, es, 0); err != nil {
		return err
	}
	var gone []string
	for _, prefix := range []string{tenant + "/packs/", tenant + "/index/"} {
		if err := s.b.List(ctx, prefix, func(o Object) error { gone = append(gone, o.Key); return nil }); err != nil {
			return err
		}
	}
	for _, k := range gone {
		if err := s.b.Delete(ctx, k); err != nil {
			return err
		}
	}
	s.forgetIndex(tenant)
	return nil
}

// contentsOf reads a Read's tar stream into its files' contents, by SHA-256.
func contentsOf(r io.Reader) (map[string][]byte, error) {
	out := map[string][]byte{}
	tr := newTarReader(r)
	for {
		name, data, err := tr()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if data != nil && !strings.HasSuffix(name, "/") {
			out[sumOf(data)] = data
		}
	}
}

func newTarReader(r io.Reader) func() (string, []byte, error) {
	tr := tar.NewReader(r)
	return func() (string, []byte, error) {
		h, err := tr.Next()
		if err != nil {
			return "", nil, err
		}
		if h.Typeflag != tar.TypeReg {
			return h.Name, nil, nil
		}
		data, err := io.ReadAll(tr)
		return h.Name, data, err
	}
}

func sumOf(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}
