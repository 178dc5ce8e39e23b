package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/internal/testenv"
)

// backends runs test on every backend: a directory, and a real S3 server.
func backends(t *testing.T, test func(t *testing.T, b Backend)) {
	t.Run("file", func(t *testing.T) {
		b, err := NewFileBackend(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		test(t, b)
	})
	t.Run("s3", func(t *testing.T) {
		srv, bucket := testenv.S3(t)
		b, err := Open(t.Context(), "s3://"+bucket+"/some/prefix", srv.Getenv)
		if err != nil {
			t.Fatal(err)
		}
		test(t, b)
	})
}

// TestBackendContract holds both backends to the same behaviour.
func TestBackendContract(t *testing.T) {
	backends(t, func(t *testing.T, b Backend) {
		ctx := t.Context()
		if err := b.Put(ctx, "t/a/one", strings.NewReader("one"), 3); err != nil {
			t.Fatal(err)
		}
		if err := b.Put(ctx, "t/a/two", strings.NewReader("two!"), -1); err != nil {
			t.Fatal(err)
		}
		if err := b.Put(ctx, "t/b/three", strings.NewReader("3"), 1); err != nil {
			t.Fatal(err)
		}
		rc, err := b.Get(ctx, "t/a/two")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if string(got) != "two!" {
			t.Errorf("Get = %q", got)
		}
		if _, err := b.Get(ctx, "t/a/none"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get of a missing key: %v, want ErrNotFound", err)
		}
		if ok, err := b.Exists(ctx, "t/a/one"); !ok || err != nil {
			t.Errorf("Exists = %v, %v", ok, err)
		}
		if ok, err := b.Exists(ctx, "t/a/none"); ok || err != nil {
			t.Errorf("Exists of a missing key = %v, %v", ok, err)
		}
		if err := b.Touch(ctx, "t/a/one"); err != nil {
			t.Errorf("Touch: %v", err)
		}
		if err := b.Touch(ctx, "t/a/none"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Touch of a missing key: %v, want ErrNotFound", err)
		}
		var keys []string
		if err := b.List(ctx, "t/a/", func(o Object) error { keys = append(keys, fmt.Sprintf("%s:%d", o.Key, o.Size)); return nil }); err != nil {
			t.Fatal(err)
		}
		if strings.Join(keys, " ") != "t/a/one:3 t/a/two:4" {
			t.Errorf("List t/a/ = %v", keys)
		}
		if err := b.Delete(ctx, "t/a/one"); err != nil {
			t.Fatal(err)
		}
		if err := b.Delete(ctx, "t/a/one"); err != nil {
			t.Errorf("Delete of a missing key: %v", err)
		}
		for _, bad := range []string{"", "/abs", "a/../b", "a//b", "./a", "a/"} {
			if err := b.Put(ctx, bad, strings.NewReader("x"), 1); err == nil {
				t.Errorf("Put %q was accepted", bad)
			}
		}
	})
}

// tarball is a tar stream of files (path → contents; a trailing / is a directory, a
// value "-> target" a symlink), in the order given by names.
func tarball(t testing.TB, names []string, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		v := files[n]
		h := &tar.Header{Name: n, Mode: 0o644, ModTime: time.Unix(1700000000, 0)}
		switch {
		case strings.HasSuffix(n, "/"):
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		case strings.HasPrefix(v, "-> "):
			h.Typeflag, h.Linkname = tar.TypeSymlink, strings.TrimPrefix(v, "-> ")
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(v))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(v))
		}
	}
	tw.Close()
	return buf.Bytes()
}

// untar reads a tar stream back into the same map form.
func untar(t *testing.T, r io.Reader) ([]string, map[string]string) {
	t.Helper()
	var names []string
	files := map[string]string{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names, files
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		switch h.Typeflag {
		case tar.TypeSymlink:
			files[h.Name] = "-> " + h.Linkname
		case tar.TypeDir:
			files[h.Name] = ""
		default:
			b, _ := io.ReadAll(tr)
			files[h.Name] = string(b)
		}
	}
}

func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)[:n]
}

// TestStore: a snapshot reads back as it was written (directories, symlinks, an empty
// file, a file past the in-memory bound); a second one of a barely changed workspace
// stores little; tenants share nothing; limits hold; deleted snapshots' contents are
// collected, and nothing another snapshot uses.
func TestStore(t *testing.T) {
	backends(t, func(t *testing.T, b Backend) {
		ctx := t.Context()
		s := NewStore(b)
		big := randomText(inMemory + 1234)
		names := []string{".git/", ".git/HEAD", "src/", "src/main.go", ".env", "empty", "link", "big.bin", "same-as-main.go"}
		files := map[string]string{".git/": "", ".git/HEAD": "ref: refs/heads/main\n", "src/": "", "src/main.go": "package main\n" + randomText(5000),
			".env": "SECRET=1\n", "empty": "", "link": "-> src/main.go", "big.bin": big}
		files["same-as-main.go"] = files["src/main.go"]
		meta := Snapshot{ID: NewID(), Tenant: "acme", Session: "s-1", Name: "first", Kind: KindSnapshot, CreatedAt: time.Now().UTC(),
			Image: "img:1", Env: map[string]string{"A": "1"}, Labels: map[string]string{"team": "x"}}
		first, err := s.Write(ctx, meta, bytes.NewReader(tarball(t, names, files)), 0)
		if err != nil {
			t.Fatal(err)
		}
		if first.Files != 6 || first.Bytes != int64(len(big)+len(files["src/main.go"])*2+len(files[".git/HEAD"])+len(files[".env"])) {
			t.Errorf("first: files %d bytes %d", first.Files, first.Bytes)
		}
		var out bytes.Buffer
		if _, err := s.Read(ctx, "acme", first.ID, &out); err != nil {
			t.Fatal(err)
		}
		gotNames, gotFiles := untar(t, &out)
		if !sameNames(gotNames, names) || !maps.Equal(gotFiles, files) {
			t.Errorf("read back %v, want %v (contents equal: %v)", gotNames, names, maps.Equal(gotFiles, files))
		}
		got, err := s.Get(ctx, "acme", first.ID)
		if err != nil || got.Name != "first" || got.Image != "img:1" || got.Env["A"] != "1" || got.Labels["team"] != "x" {
			t.Errorf("Get = %+v, %v", got, err)
		}

		// One file changed: little new is stored.
		files["src/main.go"] = "package main // changed\n"
		meta2 := meta
		meta2.ID, meta2.Name, meta2.CreatedAt = NewID(), "second", meta.CreatedAt.Add(time.Second)
		second, err := s.Write(ctx, meta2, bytes.NewReader(tarball(t, names, files)), 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("stored: first %d bytes, second %d bytes", first.Stored, second.Stored)
		if second.Stored > 4096 || second.Stored >= first.Stored/100 {
			t.Errorf("second snapshot stored %d bytes (first %d): want only the changed file and the entries", second.Stored, first.Stored)
		}

		// Another tenant: nothing shared, nothing visible.
		if _, err := s.Get(ctx, "globex", first.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("another tenant's Get: %v, want ErrNotFound", err)
		}
		if _, err := s.Read(ctx, "globex", first.ID, io.Discard); !errors.Is(err, ErrNotFound) {
			t.Errorf("another tenant's Read: %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, "globex", first.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("another tenant's Delete: %v, want ErrNotFound", err)
		}
		other := meta
		other.ID, other.Tenant = NewID(), "globex"
		if g, err := s.Write(ctx, other, bytes.NewReader(tarball(t, names, files)), 0); err != nil || g.Stored < int64(len(big))/2 {
			t.Errorf("another tenant's first snapshot stored %d bytes (%v): contents are never shared between tenants", g.Stored, err)
		}

		// A limit.
		over := meta
		over.ID = NewID()
		if _, err := s.Write(ctx, over, bytes.NewReader(tarball(t, names, files)), 1000); !errors.Is(err, ErrTooLarge) {
			t.Errorf("Write past the limit: %v, want ErrTooLarge", err)
		}
		if _, err := s.Get(ctx, "acme", over.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("a refused snapshot was recorded: %v", err)
		}

		list, err := s.List(ctx, "acme")
		if err != nil || len(list) != 2 || list[0].ID != first.ID || list[1].ID != second.ID {
			t.Errorf("List = %v, %v", list, err)
		}
		if l, _ := s.List(ctx, "acme", KindArchive); len(l) != 0 {
			t.Errorf("List of archives = %v", l)
		}

		// Delete the first: the second uses all its contents (same-as-main.go kept
		// the old main.go), so nothing is collected, and the second reads whole.
		if err := s.Delete(ctx, "acme", first.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "acme", first.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get after Delete: %v", err)
		}
		if n, _, err := s.Collect(ctx, "acme", 0); err != nil || n != 0 {
			t.Errorf("Collect = %d blobs, %v; want none: the second snapshot uses them all", n, err)
		}
		// A third with a file of its own, deleted: that file's contents go, nothing else.
		names3 := append(slices.Clone(names), "only-third")
		files["only-third"] = randomText(3000)
		meta3 := meta
		meta3.ID, meta3.CreatedAt = NewID(), meta.CreatedAt.Add(2*time.Second)
		if _, err := s.Write(ctx, meta3, bytes.NewReader(tarball(t, names3, files)), 0); err != nil {
			t.Fatal(err)
		}
		delete(files, "only-third")
		if err := s.Delete(ctx, "acme", meta3.ID); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // past the file system's clock granularity
		if n, freed, err := s.Collect(ctx, "acme", 0); err != nil || n != 1 {
			t.Errorf("Collect = %d blobs (%d bytes), %v; want only-third's", n, freed, err)
		}
		out.Reset()
		if _, err := s.Read(ctx, "acme", second.ID, &out); err != nil {
			t.Fatal(err)
		}
		if _, gotFiles := untar(t, &out); !maps.Equal(gotFiles, files) {
			t.Error("the second snapshot is not whole after the collection")
		}
		if n, _, _ := s.Collect(ctx, "acme", time.Hour); n != 0 {
			t.Errorf("Collect with a grace collected %d young blobs", n)
		}
	})
}

func TestValidID(t *testing.T) {
	if id := NewID(); !ValidID(id) {
		t.Errorf("ValidID(%q) = false", id)
	}
	for _, bad := range []string{"", "snap-", "../snap-aaaaaaaaaaaaaaaaaaaa", "snap-aaaaaaaaaaaaaaaaaaa1", "snap-AAAAAAAAAAAAAAAAAAAA", strings.Repeat("a", 10000)} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
}

// TestOpen: the URLs an operator writes, and the ones that must fail with a reason.
func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if b, err := Open(ctx, "file://"+dir, func(string) string { return "" }); err != nil || b.String() != "file://"+dir {
		t.Errorf("Open file:// = %v, %v", b, err)
	}
	for _, bad := range []string{"relative/dir", "file://host/dir", "ftp://x/y", "s3://", "file://relative"} {
		if _, err := Open(ctx, bad, func(string) string { return "" }); err == nil {
			t.Errorf("Open(%q) was accepted", bad)
		}
	}
}

// sameNames reports whether a Read gave back the names written, each once, and every
// directory before what it holds.
func sameNames(got, want []string) bool {
	at := map[string]int{}
	for i, n := range got {
		if _, dup := at[n]; dup {
			return false
		}
		at[n] = i
	}
	if len(got) != len(want) {
		return false
	}
	for _, n := range want {
		i, ok := at[n]
		if !ok {
			return false
		}
		if dir := path.Dir(strings.TrimSuffix(n, "/")); dir != "." {
			if j, ok := at[dir+"/"]; ok && j > i {
				return false
			}
		}
	}
	return true
}

// putLoose stores contents as a cws before pack files did, one object per blob, and
// returns their name.
func putLoose(t *testing.T, s *Store, tenant string, body []byte) string {
	t.Helper()
	h := sha256.Sum256(body)
	sum := hex.EncodeToString(h[:])
	z := s.enc.EncodeAll(body, nil)
	if err := s.b.Put(t.Context(), blobKey(tenant, sum), bytes.NewReader(z), int64(len(z))); err != nil {
		t.Fatal(err)
	}
	return sum
}
