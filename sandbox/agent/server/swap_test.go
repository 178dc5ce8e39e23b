package server

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
)

const swapSecret = "S3CRET"

// swapEnv is a workspace with a denied .env and secrets/, and a goroutine that keeps
// flipping "x" between a plain file and a symlink to .env, and "d" between a directory
// and a symlink to secrets/, until the test ends.
func swapEnv(t *testing.T) (*Server, *guard.Guard, string) {
	t.Helper()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(root, ".env"), []byte(swapSecret+" env\n"), 0o644))
	must(os.MkdirAll(filepath.Join(root, "secrets"), 0o755))
	must(os.WriteFile(filepath.Join(root, "secrets", "f"), []byte(swapSecret+" dir\n"), 0o644))
	s, err := New(Config{Root: root})
	must(err)
	g := &guard.Guard{Deny: []string{".env", "secrets"}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		x, d := filepath.Join(root, "x"), filepath.Join(root, "d")
		for ctx.Err() == nil {
			os.Remove(x)
			os.WriteFile(x, []byte("public\n"), 0o644)
			os.RemoveAll(d)
			os.MkdirAll(d, 0o755)
			os.WriteFile(filepath.Join(d, "f"), []byte("public\n"), 0o644)
			os.Remove(x)
			os.Symlink(".env", x)
			os.RemoveAll(d)
			os.Symlink("secrets", d)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return s, g, root
}

func call(t *testing.T, op func(context.Context, json.RawMessage, []byte, *responder) (any, error), args any, body []byte) (string, error) {
	t.Helper()
	raw, _ := json.Marshal(args)
	var out bytes.Buffer
	res, err := op(context.Background(), raw, body, &responder{w: &out})
	b, _ := json.Marshal(res)
	return out.String() + string(b), err
}

// TestSwapRaces: whatever is swapped between the check and the open, a denied file's
// contents never come out of read, list or search, and a write never changes it. Both
// the openat2 path and its O_NOFOLLOW fallback are tried.
func TestSwapRaces(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		name := map[bool]string{false: "openat2", true: "openat fallback"}[fallback]
		t.Run(name, func(t *testing.T) {
			noOpenat2.Store(fallback)
			t.Cleanup(func() { noOpenat2.Store(false) })
			s, g, root := swapEnv(t)
			const rounds = 3000
			leaks := map[string]int{}
			for i := 0; i < rounds; i++ {
				for _, tc := range []struct {
					op   string
					fn   func(context.Context, json.RawMessage, []byte, *responder) (any, error)
					args any
				}{
					{"read x", s.read, agent.ReadArgs{Path: "x", Guard: g}},
					{"read d/f", s.read, agent.ReadArgs{Path: "d/f", Guard: g}},
					{"search d", s.search, agent.SearchArgs{Query: swapSecret, Path: "d", Hidden: true, Guard: g}},
					{"search x", s.search, agent.SearchArgs{Query: swapSecret, Path: "x", Hidden: true, Guard: g}},
					{"list d", s.list, agent.ListArgs{Path: "d", Guard: g}},
				} {
					out, _ := call(t, tc.fn, tc.args, nil)
					if strings.Contains(out, swapSecret) {
						leaks[tc.op]++
					}
				}
				call(t, s.write, agent.WriteArgs{Path: "x", Create: true, Guard: g}, []byte("overwritten\n"))
				call(t, s.write, agent.WriteArgs{Path: "d/f", Create: true, Guard: g}, []byte("overwritten\n"))
			}
			for op, n := range leaks {
				t.Errorf("%s leaked the denied contents %d times in %d", op, n, rounds)
			}
			if b, _ := os.ReadFile(filepath.Join(root, ".env")); string(b) != swapSecret+" env\n" {
				t.Errorf(".env was written through a swapped link: %q", b)
			}
			if b, _ := os.ReadFile(filepath.Join(root, "secrets", "f")); string(b) != swapSecret+" dir\n" {
				t.Errorf("secrets/f was written through a swapped link: %q", b)
			}
		})
	}
}

// TestOpenRealRefusesLinks: the resolved path is opened without following any link.
func TestOpenRealRefusesLinks(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "real"), 0o755)
	os.WriteFile(filepath.Join(root, "real", "f"), []byte("x"), 0o644)
	os.Symlink("real", filepath.Join(root, "link"))
	os.Symlink("real/f", filepath.Join(root, "flink"))
	ws, err := openWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, fallback := range []bool{false, true} {
		noOpenat2.Store(fallback)
		for _, p := range []string{"link/f", "flink", "link"} {
			if f, err := ws.openReal(p, os.O_RDONLY, 0); err == nil || !swapped(err) {
				if f != nil {
					f.Close()
				}
				t.Errorf("fallback=%v: openReal(%q) = %v, want ELOOP", fallback, p, err)
			}
		}
		f, err := ws.openReal("real/f", os.O_RDONLY, 0)
		if err != nil {
			t.Errorf("fallback=%v: openReal(real/f) = %v", fallback, err)
		} else {
			f.Close()
		}
	}
	noOpenat2.Store(false)
}
