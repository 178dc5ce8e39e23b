package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"text/tabwriter"
	"time"
)

// printJSON writes v as indented JSON and a newline.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// newTable returns a tabwriter for column output; write rows with tabs and Flush it.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
}

// ago formats the time since t like docker's "3m" ("-" for the zero time).
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return shortDuration(now.Sub(t))
}

// until formats the time left until t: "in 27m", or "passed" ("-" for the zero time).
func until(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now)
	if d <= 0 {
		return "passed"
	}
	return "in " + shortDuration(d)
}

// shortDuration is d in its largest unit: 45s, 3m, 2h, 5d.
func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

// humanBytes formats n in binary units: 512 B, 1.5 KiB, 12.3 MiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progress counts the bytes flowing through it and, when enabled, redraws one status
// line on w at most every 200 ms.
type progress struct {
	w     io.Writer
	verb  string // "sent", "received"
	on    bool
	start time.Time

	mu   sync.Mutex
	n    int64
	last time.Time
}

func newProgress(w io.Writer, verb string, on bool) *progress {
	return &progress{w: w, verb: verb, on: on, start: time.Now()}
}

// add counts n bytes.
func (p *progress) add(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n += int64(n)
	if p.on && time.Since(p.last) >= 200*time.Millisecond {
		p.last = time.Now()
		fmt.Fprintf(p.w, "\r%s %s…\033[K", humanBytes(p.n), p.verb)
	}
}

// done ends the status line with the total and the time taken.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on {
		fmt.Fprintf(p.w, "\r%s %s in %s\033[K\n", humanBytes(p.n), p.verb, time.Since(p.start).Round(100*time.Millisecond))
	}
}

// total is the byte count so far.
func (p *progress) total() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// reader counts what is read from r.
func (p *progress) reader(r io.Reader) io.Reader { return progressReader{r, p} }

// writer counts what is written to w.
func (p *progress) writer(w io.Writer) io.Writer { return progressWriter{w, p} }

type progressReader struct {
	r io.Reader
	p *progress
}

func (r progressReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.p.add(n)
	return n, err
}

type progressWriter struct {
	w io.Writer
	p *progress
}

func (w progressWriter) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	w.p.add(n)
	return n, err
}
