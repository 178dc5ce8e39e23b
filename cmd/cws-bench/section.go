package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/cwsdev/cws/internal/bench"
)

// section is one named measurement. Run measures and returns its rows; it may return
// the rows it has together with an error. To add a section, put it in its own file:
//
//	func init() {
//		sections = append(sections, section{Name: "search", Order: 30, Doc: "…", Run: benchSearch})
//		ratios = append(ratios, ratio{Num: "rg via docker exec", Den: "agent search", Target: 10})
//	}
//
// Rows are named for the table ("agent read 4 KiB"); ratios refer to those names.
type section struct {
	Name  string // for -only; lower case, no spaces
	Order int    // sections run and print in ascending Order
	Doc   string // one line, for -list
	Run   func(ctx context.Context, e *env) ([]bench.Row, error)
}

// sections is the registry; every section file appends to it in init.
var sections []section

// ordered is the registry sorted by Order, then name.
func ordered() []section {
	s := slices.Clone(sections)
	slices.SortStableFunc(s, func(a, b section) int {
		return cmp.Or(cmp.Compare(a.Order, b.Order), cmp.Compare(a.Name, b.Name))
	})
	return s
}

// ratio compares the p50 of two rows, printed under the table when both were measured.
type ratio struct {
	Num, Den string  // row names
	Target   float64 // the ratio we aim for; 0 means none
	AtMost   bool    // the target is an upper bound (num/den ≤ Target)
}

// ratios is the registry of comparisons; section files append to it in init.
var ratios []ratio

func (r ratio) line(rows []bench.Row) (string, bool) {
	num := slices.IndexFunc(rows, func(x bench.Row) bool { return x.Name == r.Num && x.N > 0 })
	den := slices.IndexFunc(rows, func(x bench.Row) bool { return x.Name == r.Den && x.N > 0 })
	if num < 0 || den < 0 || rows[den].P50 <= 0 {
		return "", false
	}
	x := float64(rows[num].P50) / float64(rows[den].P50)
	s := fmt.Sprintf("**%s p50 / %s p50 = %.1f×**", r.Num, r.Den, x)
	if r.Target > 0 {
		verdict, op := "met", "≥"
		if r.AtMost {
			op = "≤"
		}
		if (!r.AtMost && x < r.Target) || (r.AtMost && x > r.Target) {
			verdict = "NOT met"
		}
		s += fmt.Sprintf(" (target %s %g×: %s)", op, r.Target, verdict)
	}
	return s, true
}
