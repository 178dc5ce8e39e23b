package agent_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
)

// The LSP op over the wire: the glue reads files through the workspace's resolution and
// guard, and a language without a server answers at once. The tools themselves are
// tested in server/lsp against a fake server and real gopls.
func TestLSPOverTheWire(t *testing.T) {
	c, dir, _ := pipeAgent(t)
	ctx := ctxT(t)
	if err := os.MkdirAll(filepath.Join(dir, "secret"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"a.rs": "fn main() {}\n", "secret/k.go": "package k\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("secret/k.go", filepath.Join(dir, "link.go")); err != nil {
		t.Fatal(err)
	}
	g := &guard.Guard{Deny: []string{"secret/**"}}
	call := func(tool string, args any) (agent.LSPResult, error) {
		raw, _ := json.Marshal(args)
		return c.LSP(ctx, agent.LSPArgs{Tool: tool, Args: raw, Guard: g})
	}

	t.Run("no server for the language: at once, saying so", func(t *testing.T) {
		start := time.Now()
		_, err := call("get_hover", map[string]any{"file_path": "a.rs", "line": 1, "character": 1})
		var we *agent.WireError
		if !errors.As(err, &we) || we.Code != agent.CodeUnsupported || !errors.Is(err, agent.ErrUnsupported) || !strings.Contains(we.Message, ".rs") {
			t.Fatalf("err = %#v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("took %s", d)
		}
	})
	t.Run("denied file and a link to it", func(t *testing.T) {
		for _, p := range []string{"secret/k.go", "link.go"} {
			_, err := call("get_document_symbols", map[string]any{"file_path": p})
			if !errors.Is(err, agent.ErrDenied) {
				t.Errorf("%s: err = %v, want denied", p, err)
			}
		}
	})
	t.Run("out of the workspace", func(t *testing.T) {
		_, err := call("get_document_symbols", map[string]any{"file_path": "../etc/passwd.go"})
		if !errors.Is(err, agent.ErrTraversal) {
			t.Errorf("err = %v, want traversal", err)
		}
	})
	t.Run("logs need no server", func(t *testing.T) {
		res, err := call("get_server_logs", map[string]any{"limit": 10})
		if err != nil || string(res.Result) != `{"logs":[]}` || res.Dropped != 0 {
			t.Errorf("got %s %d %v", res.Result, res.Dropped, err)
		}
	})
	t.Run("unknown tool", func(t *testing.T) {
		if _, err := call("get_everything", nil); !errors.Is(err, agent.ErrInvalid) {
			t.Errorf("err = %v", err)
		}
	})
}
