package bench

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"p50 of 1..100", hundred, 50, 50 * time.Millisecond},
		{"p99 of 1..100", hundred, 99, 99 * time.Millisecond},
		{"p100 of 1..100", hundred, 100, 100 * time.Millisecond},
		{"p50 of four", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p99 of four", ms(1, 2, 3, 4), 99, 4 * time.Millisecond},
		{"tiny p", ms(1, 2, 3), 0.1, time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.sorted, tc.p); got != tc.want {
				t.Errorf("Percentile(%v) = %v, want %v", tc.p, got, tc.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	in := ms(5, 1, 3)
	r := Summarize("x", in)
	want := Row{Name: "x", N: 3, Mean: 3 * time.Millisecond, P50: 3 * time.Millisecond, P90: 5 * time.Millisecond, P99: 5 * time.Millisecond,
		Min: time.Millisecond, Max: 5 * time.Millisecond}
	if r != want {
		t.Errorf("Summarize = %+v, want %+v", r, want)
	}
	if in[0] != 5*time.Millisecond {
		t.Error("Summarize sorted its input")
	}
	if r := Summarize("none", nil); r.N != 0 || r.P50 != 0 {
		t.Errorf("Summarize(nil) = %+v", r)
	}
}

func TestRun(t *testing.T) {
	calls := 0
	got, err := Run(context.Background(), 2, 3, func(context.Context) error { calls++; return nil })
	if err != nil || len(got) != 3 || calls != 5 {
		t.Errorf("Run = %d samples, %v after %d calls; want 3, nil, 5", len(got), err, calls)
	}
	boom := errors.New("boom")
	calls = 0
	got, err = Run(context.Background(), 0, 5, func(context.Context) error {
		if calls++; calls == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || len(got) != 2 {
		t.Errorf("Run = %d samples, %v; want 2, boom", len(got), err)
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	err := WriteTable(&b, []Row{
		Summarize("fast", []time.Duration{800 * time.Microsecond, 1200 * time.Microsecond}),
		{Name: "skipped", Note: "no samples"},
		{Name: "PUTs", N: 1, Rate: 2077, Note: "a count"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "| operation | n | mean | p50 | p90 | p99 | note |\n" +
		"|---|---:|---:|---:|---:|---:|---|\n" +
		"| fast | 2 | 1 ms | 800 µs | 1.2 ms | 1.2 ms |  |\n" +
		"| skipped | 0 | n/a | n/a | n/a | n/a | no samples |\n" +
		"| PUTs | 1 | — | 2077 | — | — | a count |\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{500, "500 ns"},
		{1500, "1.5 µs"},
		{123456 * time.Microsecond, "123 ms"},
		{2500 * time.Millisecond, "2.5 s"},
	}
	for _, tc := range tests {
		if got := Format(tc.d); got != tc.want {
			t.Errorf("Format(%d) = %q, want %q", tc.d, got, tc.want)
		}
	}
}
