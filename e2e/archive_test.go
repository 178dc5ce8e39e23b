package e2e_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/sandbox/agent/tartest"
)

// TestArchiveUploadAllOrNothing drives PUT /v1/sessions/{id}/archive on the real cws
// and Docker: a hostile upload is refused with its status, and the workspace volume is
// byte for byte what it was (hashed inside the container, denied files included); an
// accepted gzipped upload merges and materializes its hard link as a copy.
func TestArchiveUploadAllOrNothing(t *testing.T) {
	requireRealDeps(t)
	fx := newFixture(t)
	srv := startCWS(t, fx, testenv.Redis(t), freeAddr(t))
	t.Cleanup(func() { srv.deleteAll(t, fx, tenantAcme) })
	tok := fx.token(t, tenantAcme, "archive", "")
	r := do(t, nil, srv.url, http.MethodPost, "/v1/sessions", tok, nil, nil)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decode[sessionView](t, r).ID

	// The container, for looking at /workspace behind cws's back.
	ctr := boxOf(t, id)
	sh := func(t *testing.T, script string) string {
		t.Helper()
		out, err := boxExec(ctr, "/workspace", "sh", "-c", script)
		if err != nil {
			t.Fatalf("exec %q in the sandbox: %v\n%s", script, err, out)
		}
		return string(out)
	}
	const tree = `find . -printf '%p %y %m %l\n' | LC_ALL=C sort; find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum`
	upload := func(t *testing.T, body []byte) rest {
		t.Helper()
		return do(t, nil, srv.url, http.MethodPut, "/v1/sessions/"+id+"/archive", tok, body, map[string]string{"Content-Type": "application/x-tar"})
	}

	base := tartest.Build(tartest.File("README.md", "# base\n"), tartest.File("src/main.go", "package main\n"))
	if r := upload(t, base); r.status != http.StatusOK {
		t.Fatalf("base upload: %d %s", r.status, r.body)
	}
	sh(t, "printf 'TOKEN=hunter2\\n' > .env")
	before := sh(t, tree)

	allowed := []tartest.Entry{tartest.File("new.txt", "new\n"), tartest.File("src/main.go", "package main // replaced\n")}
	refused := func(ents ...tartest.Entry) []byte {
		return tartest.Build(append(append([]tartest.Entry{}, allowed...), ents...)...)
	}
	for _, tc := range []struct {
		name   string
		body   []byte
		status int
		code   string
	}{
		{"dot-dot name", refused(tartest.File("../escape.txt", "x")), http.StatusBadRequest, "path_traversal"},
		{"absolute name", refused(tartest.File("/etc/cws-escape", "x")), http.StatusBadRequest, "path_traversal"},
		{"file through the archive's symlink", refused(tartest.Symlink("link", "src"), tartest.File("link/x", "x")), http.StatusBadRequest, "path_traversal"},
		{"symlink to /etc", refused(tartest.Symlink("link", "/etc"), tartest.File("link/x", "x")), http.StatusBadRequest, "path_traversal"},
		{"symlink out of the workspace", refused(tartest.Symlink("out", "../etc/passwd")), http.StatusBadRequest, "path_traversal"},
		// The archive scope moves the whole tree (deniedPaths guard the agent's tools), so a
		// denied name is no refusal here; a hard link must still name an earlier entry.
		{"hard link to a workspace file", refused(tartest.Hardlink("copy", ".env")), http.StatusBadRequest, "invalid_params"},
		{"hard link out of the workspace", refused(tartest.Hardlink("copy", "../../etc/passwd")), http.StatusBadRequest, "path_traversal"},
		{"hard link to a missing file", refused(tartest.Hardlink("copy", "nowhere")), http.StatusBadRequest, "invalid_params"},
		{"fifo", refused(tartest.Entry{Name: "fifo", Type: tar.TypeFifo}), http.StatusBadRequest, "invalid_params"},
		{"duplicate entry", refused(tartest.File("new.txt", "again\n")), http.StatusBadRequest, "invalid_params"},
		{"gzip bomb", gzipBomb(t, allowed), http.StatusRequestEntityTooLarge, "too_large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := upload(t, tc.body)
			var body struct {
				Error struct{ Code, Message string }
			}
			_ = json.Unmarshal(r.body, &body)
			if r.status != tc.status || body.Error.Code != tc.code {
				t.Errorf("got %d %s, want %d %s", r.status, r.body, tc.status, tc.code)
			}
			if after := sh(t, tree); after != before {
				t.Fatalf("workspace changed by a refused upload:\nbefore\n%s\nafter\n%s", before, after)
			}
			if ls := sh(t, "ls -A"); strings.Contains(ls, ".cws-staging-") {
				t.Fatalf("staging directory left behind:\n%s", ls)
			}
		})
	}

	t.Run("accepted gzipped upload", func(t *testing.T) {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		_, _ = zw.Write(tartest.Build(
			tartest.File("src/main.go", "package main // v2\n"),
			tartest.File("bin/run", "#!/bin/sh\n"),
			tartest.Hardlink("bin/run2", "bin/run"),
		))
		_ = zw.Close()
		if r := upload(t, gz.Bytes()); r.status != http.StatusOK || !strings.Contains(string(r.body), `"files":3`) {
			t.Fatalf("upload: %d %s", r.status, r.body)
		}
		want := "README.md 1 7\nsrc/main.go 1 19\nbin/run 1 10\nbin/run2 1 10\n"
		if got := sh(t, "stat -c '%n %h %s' README.md src/main.go bin/run bin/run2"); got != want {
			t.Errorf("after the upload:\n%swant\n%s", got, want)
		}
	})
}

// gzipBomb is a gzipped archive whose last entry declares 5 GiB, more than any upload
// may hold, and whose body is 64 MiB of zeros (about 64 KiB compressed) before it ends.
func gzipBomb(t *testing.T, first []tartest.Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	for _, e := range first {
		_ = tw.WriteHeader(&tar.Header{Name: e.Name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.Body))})
		_, _ = tw.Write([]byte(e.Body))
	}
	if err := tw.WriteHeader(&tar.Header{Name: "bomb", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5 << 30}); err != nil {
		t.Fatal(err)
	}
	zero := make([]byte, 1<<20)
	for range 64 {
		_, _ = tw.Write(zero)
	}
	_ = tw.Flush()
	_ = zw.Close()
	return buf.Bytes()
}
