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
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
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

func call(t *testing.T, fn op.Handler, args any, body []byte) (string, error) {
	t.Helper()
	raw, _ := json.Marshal(args)
	var out bytes.Buffer
	res, err := fn(context.Background(), raw, body, op.NewResponder(&out))
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
			fs.NoOpenat2.Store(fallback)
			t.Cleanup(func() { fs.NoOpenat2.Store(false) })
			s, g, root := swapEnv(t)
			const rounds = 3000
			leaks := map[string]int{}
			for i := 0; i < rounds; i++ {
				for _, tc := range []struct {
					op   string
					fn   func(context.Context, json.RawMessage, []byte, *op.Responder) (any, error)
					args any
				}{
					{"read x", s.files.Read, agent.ReadArgs{Path: "x", Guard: g}},
					{"read d/f", s.files.Read, agent.ReadArgs{Path: "d/f", Guard: g}},
					{"search d", s.search.Search, agent.SearchArgs{Query: swapSecret, Path: "d", Hidden: true, Guard: g}},
					{"search x", s.search.Search, agent.SearchArgs{Query: swapSecret, Path: "x", Hidden: true, Guard: g}},
					{"list d", s.files.List, agent.ListArgs{Path: "d", Guard: g}},
				} {
					out, _ := call(t, tc.fn, tc.args, nil)
					if strings.Contains(out, swapSecret) {
						leaks[tc.op]++
					}
				}
				call(t, s.files.Write, agent.WriteArgs{Path: "x", Create: true, Guard: g}, []byte("overwritten\n"))
				call(t, s.files.Write, agent.WriteArgs{Path: "d/f", Create: true, Guard: g}, []byte("overwritten\n"))
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
