package main

import (
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/internal/bench"
)

func TestRegistry(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range ordered() {
		if s.Name == "" || strings.ContainsAny(s.Name, " ,") || s.Run == nil || s.Doc == "" {
			t.Errorf("section %+v: want a name without spaces or commas, a Doc and a Run", s)
		}
		if seen[s.Name] {
			t.Errorf("section %q registered twice", s.Name)
		}
		seen[s.Name] = true
	}
}

func TestChoose(t *testing.T) {
	all, err := choose("")
	if err != nil || len(all) != len(sections) {
		t.Fatalf("choose(\"\") = %d sections, %v", len(all), err)
	}
	got, err := choose("create, read")
	if err != nil || len(got) != 2 || got[0].Name != "create" || got[1].Name != "read" {
		t.Errorf("choose(create, read) = %v, %v; want both, in the order asked", got, err)
	}
	got, err = choose("mcpload,mcp")
	if err != nil || len(got) != 3 || got[0].Name != "read" || got[1].Name != "mcp" || got[2].Name != "mcpproc" {
		t.Errorf("choose(mcpload,mcp) = %v, %v; want read, mcp and mcpproc, once each", got, err)
	}
	if _, err := choose("nope"); err == nil || !strings.Contains(err.Error(), "read") || !strings.Contains(err.Error(), "mcpload") {
		t.Errorf("choose(nope) = %v, want an error listing the sections", err)
	}
}

func TestRatioLine(t *testing.T) {
	r := ratio{Num: "slow", Den: "fast", Target: 20}
	rows := []bench.Row{
		{Name: "fast", N: 10, P50: time.Millisecond},
		{Name: "slow", N: 10, P50: 30 * time.Millisecond},
	}
	if got, ok := r.line(rows); !ok || !strings.Contains(got, "= 30.0×") || !strings.Contains(got, ": met") {
		t.Errorf("line = %q, %v", got, ok)
	}
	rows[1].P50 = 10 * time.Millisecond
	if got, _ := r.line(rows); !strings.Contains(got, "NOT met") {
		t.Errorf("line = %q, want NOT met", got)
	}
	if _, ok := r.line(rows[:1]); ok {
		t.Error("line with a row missing should be skipped")
	}
}

func TestGoals(t *testing.T) {
	rows := []bench.Row{
		{Name: "fast", N: 10, P50: time.Millisecond},
		{Name: "anchor", N: 10, P50: 60 * time.Millisecond},
		{Name: "busy", N: 10, P50: time.Millisecond, Rate: 2500},
		{Name: "rss", N: 1, P50: 1, Bytes: 12 << 20},
	}
	for _, c := range []struct {
		g    goal
		want string
		met  bool
	}{
		{goal{Row: "fast", Anchor: "anchor", MaxP50: time.Millisecond, Faster: 50}, "60.0× faster", true},
		{goal{Row: "fast", Anchor: "anchor", Faster: 100}, "60.0× faster", false},
		{goal{Row: "anchor", Anchor: "fast", Slower: 1}, "60.00× the anchor's time", false},
		{goal{Row: "busy", MinRate: 3000}, "", false},
		{goal{Row: "rss", MaxBytes: 15 << 20}, "", true},
		{goal{Row: "fast", Anchor: "missing", Faster: 2}, "", false},
		{goal{Row: "anchor", Anchor: "fast", MaxOver: 60 * time.Millisecond}, "+59 ms", true},
		{goal{Row: "anchor", Anchor: "fast", MaxOver: 3 * time.Millisecond}, "+59 ms", false},
		{goal{Row: "fast", Anchor: "missing", MaxOver: time.Second}, "", false},
	} {
		r, ok := c.g.judge(rows)
		if !ok || r.met != c.met || !strings.Contains(r.versus, c.want) {
			t.Errorf("judge(%+v) = %+v, %v; want versus %q, met %v", c.g, r, ok, c.want, c.met)
		}
	}
	counts := append(rows, bench.Row{Name: "puts", N: 1, Rate: 2050}, bench.Row{Name: "budget", N: 1, Rate: 12})
	for _, c := range []struct {
		g                 goal
		cws, target, want string
		met               bool
	}{
		{goal{Row: "puts", Unit: "PUTs", MaxCount: 80}, "2050 PUTs", "≤ 80 PUTs", "", false},
		{goal{Row: "puts", Unit: "PUTs", MaxCount: 3000}, "2050 PUTs", "≤ 3000 PUTs", "", true},
		{goal{Row: "puts", Unit: "PUTs", Anchor: "budget"}, "2050 PUTs", "≤ 12 PUTs", "170.8× the anchor", false},
		{goal{Row: "budget", Unit: "GETs", Anchor: "puts"}, "12 GETs", "≤ 2050 GETs", "0.0× the anchor", true},
		{goal{Row: "puts", Unit: "PUTs", Anchor: "missing"}, "2050 PUTs", "", "", false},
	} {
		r, ok := c.g.judge(counts)
		if !ok || r.met != c.met || r.cws != c.cws || r.target != c.target || r.versus != c.want {
			t.Errorf("judge(%+v) = %+v, %v; want %q, target %q, versus %q, met %v", c.g, r, ok, c.cws, c.target, c.want, c.met)
		}
	}
	for _, c := range []struct {
		g        goal
		unjudged bool
	}{
		{goal{Row: "fast", Anchor: "missing", MaxP50: time.Second, Faster: 2}, true},
		{goal{Row: "fast", Anchor: "missing", MaxOver: time.Second}, true},
		{goal{Row: "fast", Anchor: "missing", MaxP50: time.Microsecond, Faster: 2}, false}, // not met whatever the anchor
		{goal{Row: "fast", Anchor: "missing", MaxP50: time.Second}, false},                 // met: nothing asked of the anchor
	} {
		if r, _ := c.g.judge(rows); r.unjudged != c.unjudged || !strings.Contains(r.anchor, "not measured") {
			t.Errorf("judge(%+v) = %+v; want unjudged %v", c.g, r, c.unjudged)
		}
	}
	if _, ok := (goal{Row: "not run"}).judge(rows); ok {
		t.Error("a goal whose row was not measured must be left out")
	}
	if _, ok := (goal{Row: "not run", Unit: "PUTs", MaxCount: 1}).judge(rows); ok {
		t.Error("a goal whose row was not measured must be left out")
	}
	if r, _ := (goal{Row: "puts", Unit: "PUTs", Anchor: "missing"}).judge(counts); !r.unjudged || r.met {
		t.Errorf("a count goal whose budget was not measured: %+v, want unjudged", r)
	}
	var b strings.Builder
	if ok, err := writeGoals(&b, nil); ok || err != nil || b.Len() != 0 {
		t.Errorf("writeGoals with no rows = %v, %v, %q", ok, err, b.String())
	}

	// The verdicts as printed: one goal judged on its own, one against a missing anchor.
	saved := goals
	t.Cleanup(func() { goals = saved })
	goals = []goal{
		{Order: 1, Figure: "alone", Row: "fast", MaxP50: time.Second},
		{Order: 2, Figure: "against", Row: "fast", Anchor: "missing", MaxP50: time.Second, Faster: 2},
		{Order: 3, Figure: "slow", Row: "fast", Anchor: "missing", MaxP50: time.Microsecond, Faster: 2},
	}
	b.Reset()
	if _, err := writeGoals(&b, rows); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| alone | 1 ms | — | — | ≤ 1 s | met |", "| against | 1 ms | missing: not measured | — | ≤ 1 s, ≥ 2× faster | not judged: its anchor was not measured in this run |",
		"| slow | 1 ms | missing: not measured | — | ≤ 1 µs, ≥ 2× faster | **NOT met** |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("writeGoals printed\n%s\nwant a line %q", b.String(), want)
		}
	}
}
