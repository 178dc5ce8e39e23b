package lsp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent"
)

// TestFit: a result over the budget keeps its first items and counts the rest; an edit
// plan or a single huge value is refused as too large, naming the limit.
func TestFit(t *testing.T) {
	const budget = 4096
	loc := func(i int) map[string]any {
		return map[string]any{"uri": fmt.Sprintf("file:///workspace/pkg/file%04d.go", i), "range": map[string]any{"start": map[string]int{"line": i, "character": 1}}}
	}
	var locs []map[string]any
	for i := range 200 {
		locs = append(locs, loc(i))
	}
	enc := func(v any) json.RawMessage {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	small := enc(locs[:3])

	t.Run("small results pass unchanged", func(t *testing.T) {
		out, omitted, err := Fit("get_references", small, budget)
		if err != nil || omitted != 0 || string(out) != string(small) {
			t.Fatalf("Fit = %s, %d, %v", out, omitted, err)
		}
	})
	t.Run("an array keeps its first items", func(t *testing.T) {
		out, omitted, err := Fit("get_references", enc(locs), budget)
		var got []map[string]any
		if err != nil || json.Unmarshal(out, &got) != nil {
			t.Fatalf("Fit = %s, %v", out, err)
		}
		if len(out) > budget || len(got) == 0 || len(got)+omitted != len(locs) || got[0]["uri"] != locs[0]["uri"] {
			t.Fatalf("kept %d (%d bytes) and omitted %d of %d", len(got), len(out), omitted, len(locs))
		}
	})
	t.Run("an object cuts its largest array and says so", func(t *testing.T) {
		raw := enc(map[string]any{"file_path": "a.go", "diagnostics": locs, "tags": []string{"x"}})
		out, omitted, err := Fit("get_cached_diagnostics", raw, budget)
		var got struct {
			FilePath    string           `json:"file_path"`
			Diagnostics []map[string]any `json:"diagnostics"`
			Tags        []string         `json:"tags"`
			Truncated   bool             `json:"truncated"`
			Omitted     int              `json:"omitted"`
		}
		if err != nil || json.Unmarshal(out, &got) != nil {
			t.Fatalf("Fit = %s, %v", out, err)
		}
		if len(out) > budget || got.FilePath != "a.go" || len(got.Tags) != 1 || !got.Truncated || got.Omitted != omitted ||
			len(got.Diagnostics)+omitted != len(locs) || len(got.Diagnostics) == 0 {
			t.Fatalf("Fit = %s (%d bytes), omitted %d", out, len(out), omitted)
		}
	})
	for _, tc := range []struct {
		name, tool string
		raw        json.RawMessage
	}{
		{"an edit plan is never cut", "rename_symbol", enc(map[string]any{"changes": map[string]any{"file:///a.go": locs}})},
		{"formatting edits are never cut", "format_document", enc(locs)},
		{"one huge value cannot be cut", "get_hover", enc(map[string]string{"contents": strings.Repeat("x", 2*budget)})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Fit(tc.tool, tc.raw, budget)
			var we *agent.WireError
			if !errors.As(err, &we) || we.Code != agent.CodeTooLarge || !strings.Contains(we.Message, "4096") {
				t.Fatalf("Fit = %v, want a too_large error naming the 4096-byte limit", err)
			}
		})
	}
}
