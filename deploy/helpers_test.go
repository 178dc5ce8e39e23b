package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// repoRoot is the repository's root directory (this package is deploy/).
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test file")
	}
	return filepath.Dir(filepath.Dir(file))
}

// command is one external command run by a test.
type command struct {
	dir     string
	env     []string // added to os.Environ()
	timeout time.Duration
}

// run runs name with args and returns its stdout. A failure includes stderr.
func (c command) run(ctx context.Context, name string, args ...string) (string, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), c.env...)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		if len(msg) > 4000 {
			msg = "…" + msg[len(msg)-4000:]
		}
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, msg)
	}
	return stdout.String(), nil
}

// must runs the command and fails the test if it fails.
func (c command) must(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := c.run(t.Context(), name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
