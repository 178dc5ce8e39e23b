package vscode

import (
	"bytes"
	"fmt"
	"time"
)

func sprintf(format string, a ...any) string {
	if len(a) == 0 {
		return format
	}
	return fmt.Sprintf(format, a...)
}

// since is the milliseconds since start (operationTimeMs).
func since(start time.Time) int64 { return time.Since(start).Milliseconds() }

func toText(b []byte) string { return string(bytes.ToValidUTF8(b, []byte("\uFFFD"))) }
