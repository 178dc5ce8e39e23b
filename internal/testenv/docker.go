package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Docker makes sure a Docker engine answers `docker info`; otherwise it skips the
// test locally and fails it in CI.
func Docker(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}")
	cmd.Stderr = &stderr
	var err error
	if _, err = cmd.Output(); err != nil {
		err = fmt.Errorf("docker info: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	RequireCI(t, "docker", err)
}
