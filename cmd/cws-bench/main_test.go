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
	if _, err := choose("nope"); err == nil || !strings.Contains(err.Error(), "read") {
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
