package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
)

// tarOut runs an exact capture of h's workspace and returns, per file, its contents
// when sent whole and its sum when sent as a reference.
func tarOut(t *testing.T, h *Handlers, refs bool) (whole map[string][]byte, ref map[string]string) {
	t.Helper()
	args, _ := json.Marshal(agent.TarOutArgs{Path: ".", Exact: true, Refs: refs, Remember: true})
	var frames bytes.Buffer
	if _, err := h.TarOut(context.Background(), args, nil, op.NewResponder(&frames)); err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	for {
		hd, body, err := agent.ReadFrame(&frames)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hd.Event == agent.EventData {
			stream.Write(body)
		}
	}
	whole, ref = map[string][]byte{}, map[string]string{}
	tr := tar.NewReader(&stream)
	for {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hd.Typeflag != tar.TypeReg {
			continue
		}
		if s := hd.PAXRecords[agent.TarRef]; s != "" {
			ref[hd.Name] = s
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		whole[hd.Name] = b
	}
	return whole, ref
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestCaptureRacySums: files changed just before a capture (within racyWindow) are
// remembered as racy. The next capture reads each again in the agent and sends it as a
// reference only if its contents still hash to the sum remembered; one whose contents
// differ under the same size and times (a write in the same clock tick, simulated by
// the cache holding another sum) goes whole, every byte of it, and its sum is
// corrected.
func TestCaptureRacySums(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 28))
	want := map[string][]byte{}
	for i, size := range []int{0, 1, 511, 4096, 70000, 1<<20 + 17, rng.IntN(300000), rng.IntN(3000)} {
		name := fmt.Sprintf("d%d/f%d", i%3, i)
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		want[name] = b
	}
	// Every file is racy however long this machine takes between the writes and the
	// first capture.
	saved := racyWindow
	racyWindow = time.Hour
	t.Cleanup(func() { racyWindow = saved })
	ws, err := fs.OpenWorkspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := &Handlers{WS: ws}

	// 1. Everything whole, remembered as racy (written just now).
	whole, ref := tarOut(t, h, false)
	if len(ref) != 0 || len(whole) != len(want) {
		t.Fatalf("first capture: %d whole, %d references; want %d whole", len(whole), len(ref), len(want))
	}
	stamps := map[string]sumStamp{}
	for name := range want {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, name), &st); err != nil {
			t.Fatal(err)
		}
		stamps[name] = sumStamp{id: fileID{uint64(st.Dev), st.Ino}, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
		c, ok := h.sums.get(stamps[name])
		if !ok || !c.racy || c.sum != sum(want[name]) {
			t.Fatalf("%s: cached %+v, %v; want its sum, racy", name, c, ok)
		}
	}

	// 2. Unchanged: every file goes as a reference to its own sum.
	whole, ref = tarOut(t, h, true)
	if len(whole) != 0 || len(ref) != len(want) {
		t.Fatalf("second capture: %d whole, %d references; want all %d as references", len(whole), len(ref), len(want))
	}
	for name, s := range ref {
		if s != sum(want[name]) {
			t.Errorf("%s went as a reference to %s, not its sum", name, s)
		}
	}

	// 3. The cache says other contents under the same stamps (what a write in the
	// same clock tick as the last read leaves): each such file goes whole and exact,
	// and its sum is put right.
	for name := range want {
		h.sums.put(sumCached{st: stamps[name], sum: sum([]byte("other " + name)), racy: true})
	}
	whole, ref = tarOut(t, h, true)
	if len(ref) != 0 || len(whole) != len(want) {
		t.Fatalf("third capture: %d whole, %d references; want all %d whole", len(whole), len(ref), len(want))
	}
	for name, b := range whole {
		if !bytes.Equal(b, want[name]) {
			t.Errorf("%s: %d bytes sent, not the file's %d (equal %v)", name, len(b), len(want[name]), bytes.Equal(b, want[name]))
		}
		if c, ok := h.sums.get(stamps[name]); !ok || c.sum != sum(want[name]) {
			t.Errorf("%s: cached %+v, %v after it went whole; want its sum", name, c, ok)
		}
	}

	// 4. A sum remembered as not racy is trusted as it is, unread: here a wrong one
	// goes out as the reference (what shows that nothing was read), except for a file
	// whose ctime moved since, which goes whole.
	for name := range want {
		h.sums.put(sumCached{st: stamps[name], sum: sum([]byte("trusted " + name)), racy: false})
	}
	if err := os.Chmod(filepath.Join(dir, "d0/f0"), 0o644); err != nil { // a new ctime: not the stamp
		t.Fatal(err)
	}
	whole, ref = tarOut(t, h, true)
	if _, ok := whole["d0/f0"]; !ok || len(ref) != len(want)-1 {
		t.Errorf("fourth capture: %d whole (d0/f0 among them: %v), %d references; want d0/f0 whole, the rest references", len(whole), whole["d0/f0"] != nil, len(ref))
	}
	for name, s := range ref {
		if s != sum([]byte("trusted "+name)) {
			t.Errorf("%s: a sum remembered as not racy was checked against the file (reference %s)", name, s)
		}
	}
}
