package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/cwsdev/cws/internal/bench"
)

// goal is one of the performance figures cws is held to, printed in the summary table
// beside its anchor: the same kind of work done the plain way, measured in the same run.
// A goal whose row was not measured (its section was not run) is left out.
type goal struct {
	Order  int    // goals print in ascending Order, then as registered
	Figure string // what is measured, as an operator would say it
	Row    string // the row that measures it
	Anchor string // the row it is compared with; "" for none

	MaxP50   time.Duration // the row's p50 must be at most this (0: no bound)
	MinRate  float64       // the row's Rate must be at least this (0: no bound)
	MaxBytes int64         // the row's Bytes must be at most this (0: no bound)
	// Faster: the anchor's p50 over the row's p50 must be at least this (the row is
	// this many times faster). Slower: the row's p50 over the anchor's must be at most
	// this. Zero: no bound.
	Faster, Slower float64
	// MaxOver: the row's p50 may be at most this much above the anchor's (a fixed cost
	// on top of the same work done the plain way). Zero: no bound.
	MaxOver time.Duration
	// Unit makes the goal a count (of requests, say "PUTs"): the row's Rate holds it,
	// and it must be at most MaxCount, or with no MaxCount at most the anchor's Rate (a
	// budget the run computed, e.g. from the bytes it stored).
	Unit     string
	MaxCount float64
}

// goals is the registry; section files append to it in init, in the order they print.
var goals []goal

// result is a goal judged against the rows.
type result struct {
	cws, anchor, versus, target string
	met                         bool
	// unjudged: the goal is against an anchor the run did not measure, and the rest
	// of it holds (met is false: it was not shown).
	unjudged bool
}

func (g goal) judge(rows []bench.Row) (result, bool) {
	row, ok := find(rows, g.Row)
	if !ok {
		return result{}, false
	}
	if g.Unit != "" {
		return g.judgeCount(row, rows), true
	}
	r := result{met: true}
	var targets []string
	switch { // the figure the goal is about
	case g.MaxBytes > 0:
		r.cws = fmt.Sprintf("%.1f MiB", float64(row.Bytes)/(1<<20))
	case g.MinRate > 0:
		r.cws = fmt.Sprintf("%.0f /s", row.Rate)
	default:
		r.cws = bench.Format(row.P50)
	}
	if g.MaxP50 > 0 {
		targets = append(targets, "≤ "+bench.Format(g.MaxP50))
		r.met = r.met && row.P50 <= g.MaxP50
	}
	if g.MinRate > 0 {
		targets = append(targets, fmt.Sprintf("≥ %.0f /s", g.MinRate))
		r.met = r.met && row.Rate >= g.MinRate
	}
	if g.MaxBytes > 0 {
		targets = append(targets, fmt.Sprintf("≤ %d MiB", g.MaxBytes>>20))
		r.met = r.met && row.Bytes > 0 && row.Bytes <= g.MaxBytes
	}
	if g.Anchor != "" {
		if a, ok := find(rows, g.Anchor); ok && row.P50 > 0 && a.P50 > 0 {
			r.anchor = g.Anchor + ": " + bench.Format(a.P50)
			x := float64(a.P50) / float64(row.P50)
			switch {
			case g.MaxOver > 0:
				r.versus = "+" + bench.Format(row.P50-a.P50)
				if row.P50 < a.P50 {
					r.versus = "−" + bench.Format(a.P50-row.P50)
				}
				targets = append(targets, "≤ the anchor + "+bench.Format(g.MaxOver))
				r.met = r.met && row.P50-a.P50 <= g.MaxOver
			case x >= 1:
				r.versus = fmt.Sprintf("%.1f× faster", x)
			default:
				r.versus = fmt.Sprintf("%.2f× the anchor's time", 1/x)
			}
			if g.Faster > 0 {
				targets = append(targets, fmt.Sprintf("≥ %g× faster", g.Faster))
				r.met = r.met && x >= g.Faster
			}
			if g.Slower > 0 {
				targets = append(targets, fmt.Sprintf("≤ %g× the anchor's time", g.Slower))
				r.met = r.met && 1/x <= g.Slower
			}
		} else {
			r.anchor = g.Anchor + ": not measured"
			if g.MaxOver > 0 {
				targets = append(targets, "≤ the anchor + "+bench.Format(g.MaxOver))
			}
			if g.Faster > 0 {
				targets = append(targets, fmt.Sprintf("≥ %g× faster", g.Faster))
			}
			if g.Slower > 0 {
				targets = append(targets, fmt.Sprintf("≤ %g× the anchor's time", g.Slower))
			}
			if g.Faster > 0 || g.Slower > 0 || g.MaxOver > 0 {
				r.unjudged, r.met = r.met, false
			}
		}
	}
	r.target = strings.Join(targets, ", ")
	return r, true
}

// judgeCount judges a count goal (Unit set): row's Rate against MaxCount or the
// anchor's Rate.
func (g goal) judgeCount(row bench.Row, rows []bench.Row) result {
	r := result{cws: fmt.Sprintf("%.0f %s", row.Rate, g.Unit), met: true}
	bound := g.MaxCount
	if g.Anchor != "" {
		a, ok := find(rows, g.Anchor)
		switch {
		case ok:
			r.anchor = fmt.Sprintf("%s: %.0f", g.Anchor, a.Rate)
			if a.Rate > 0 {
				r.versus = fmt.Sprintf("%.1f× the anchor", row.Rate/a.Rate)
			}
			if bound == 0 {
				bound = a.Rate
			}
		default:
			r.anchor = g.Anchor + ": not measured"
			if bound == 0 {
				r.met, r.unjudged = false, true
			}
		}
	}
	if bound > 0 {
		r.target = fmt.Sprintf("≤ %.0f %s", bound, g.Unit)
		r.met = r.met && row.Rate <= bound
	}
	return r
}

func find(rows []bench.Row, name string) (bench.Row, bool) {
	i := slices.IndexFunc(rows, func(x bench.Row) bool { return x.Name == name && x.N > 0 && (x.P50 > 0 || x.Bytes > 0 || x.Rate > 0) })
	if i < 0 {
		return bench.Row{}, false
	}
	return rows[i], true
}

// writeGoals prints the summary table of the goals whose rows were measured, and
// reports whether there was any.
func writeGoals(w io.Writer, rows []bench.Row) (bool, error) {
	var b strings.Builder
	b.WriteString("| figure | cws | anchor (same run) | cws vs anchor | goal | |\n")
	b.WriteString("|---|---:|---|---|---|---|\n")
	any := false
	sorted := slices.Clone(goals)
	slices.SortStableFunc(sorted, func(a, b goal) int { return a.Order - b.Order })
	for _, g := range sorted {
		r, ok := g.judge(rows)
		if !ok {
			continue
		}
		any = true
		verdict := "met"
		switch {
		case r.unjudged:
			verdict = "not judged: its anchor was not measured in this run"
		case !r.met:
			verdict = "**NOT met**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", g.Figure, r.cws, dash(r.anchor), dash(r.versus), dash(r.target), verdict)
	}
	if !any {
		return false, nil
	}
	_, err := io.WriteString(w, b.String())
	return true, err
}

func dash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
