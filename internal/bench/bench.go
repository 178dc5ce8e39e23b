// Package bench measures latencies and prints them as markdown tables: the statistics
// behind cmd/cws-bench, kept apart so that each section only has to produce samples.
package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Row is one measured operation. A Row with no samples prints as n/a.
type Row struct {
	Name string
	N    int
	Mean time.Duration
	P50  time.Duration
	P90  time.Duration
	P99  time.Duration
	Min  time.Duration
	Max  time.Duration
	Note string // printed in the last column, e.g. "4 KiB file, 2 cores"

	// Rate is a throughput (operations per second) measured with the samples, and
	// Bytes a size (memory); zero when the row has none. The goals table uses them.
	Rate  float64
	Bytes int64
}

// Summarize computes a Row from samples. It does not keep or modify them.
func Summarize(name string, samples []time.Duration) Row {
	r := Row{Name: name, N: len(samples)}
	if len(samples) == 0 {
		return r
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	r.Mean = sum / time.Duration(len(s))
	r.P50, r.P90, r.P99 = Percentile(s, 50), Percentile(s, 90), Percentile(s, 99)
	r.Min, r.Max = s[0], s[len(s)-1]
	return r
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of sorted samples by the
// nearest-rank method: the smallest sample that at least p% of samples are ≤ to.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted)) + 0.999999999) // ceil without float surprises
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// Run calls fn warmup times unmeasured, then n times measured, and returns the
// durations. It stops at the first error or when ctx ends.
func Run(ctx context.Context, warmup, n int, fn func(context.Context) error) ([]time.Duration, error) {
	for i := range warmup {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := fn(ctx); err != nil {
			return nil, fmt.Errorf("warm-up %d: %w", i, err)
		}
	}
	out := make([]time.Duration, 0, n)
	for i := range n {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		start := time.Now()
		if err := fn(ctx); err != nil {
			return out, fmt.Errorf("iteration %d: %w", i, err)
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// WriteTable prints rows as a markdown table.
func WriteTable(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| operation | n | mean | p50 | p90 | p99 | note |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		if r.N == 0 {
			fmt.Fprintf(&b, "| %s | 0 | n/a | n/a | n/a | n/a | %s |\n", r.Name, r.Note)
			continue
		}
		if r.Bytes > 0 { // a size, not a latency: printed in the p50 column
			fmt.Fprintf(&b, "| %s | %d | — | %.1f MiB | — | — | %s |\n", r.Name, r.N, float64(r.Bytes)/(1<<20), r.Note)
			continue
		}
		if r.P50 == 0 && r.Rate > 0 { // a count (requests), not a latency: in the p50 column
			fmt.Fprintf(&b, "| %s | %d | — | %.0f | — | — | %s |\n", r.Name, r.N, r.Rate, r.Note)
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s |\n", r.Name, r.N, Format(r.Mean), Format(r.P50), Format(r.P90), Format(r.P99), r.Note)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Format prints a duration with three significant digits in a unit that suits it.
func Format(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%d ns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.3g µs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.3g ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.3g s", d.Seconds())
	}
}
