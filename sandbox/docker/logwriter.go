package docker

import (
	"bytes"
	"context"
	"log/slog"
)

// Bounds of a logWriter: the longest line logged, and the bytes logged in all.
const (
	logLineMax  = 512
	logTotalMax = 64 << 10
)

// logWriter turns a stream (an exec's stderr) into debug log lines, bounded so that a
// chatty or hostile process cannot flood the host's logs: lines are cut at logLineMax
// bytes and after logTotalMax bytes the rest is counted and dropped. Not safe for
// concurrent use (stdcopy writes from one goroutine).
type logWriter struct {
	log     *slog.Logger
	msg     string
	line    []byte
	logged  int
	dropped int
}

func newLogWriter(log *slog.Logger, msg string) *logWriter {
	return &logWriter{log: log, msg: msg}
}

func (w *logWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := logLineMax - len(w.line); room > 0 {
			w.line = append(w.line, chunk[:min(room, len(chunk))]...)
		}
		if i < 0 {
			break
		}
		w.emit()
		p = p[i+1:]
	}
	return n, nil
}

// Flush logs a final unterminated line and, if anything was dropped, how much.
func (w *logWriter) Flush() {
	if len(w.line) > 0 {
		w.emit()
	}
	if w.dropped > 0 {
		w.log.Debug(w.msg+" truncated", "dropped_bytes", w.dropped)
		w.dropped = 0
	}
}

func (w *logWriter) emit() {
	if w.logged+len(w.line) > logTotalMax {
		w.dropped += len(w.line) + 1
	} else if w.log.Enabled(context.Background(), slog.LevelDebug) {
		w.log.Debug(w.msg, "line", string(w.line))
		w.logged += len(w.line) + 1
	}
	w.line = w.line[:0]
}
