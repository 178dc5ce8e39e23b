// Package testenv gates tests that need real dependencies (Redis, Docker): they run
// when the dependency is there, skip locally when it is not, and fail in CI (CI=true),
// where a missing dependency is a broken pipeline rather than a reason to skip.
package testenv

import (
	"os"
	"strconv"
	"testing"
)

// InCI reports whether the tests run in CI (env CI parses as true, e.g. CI=true).
func InCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// RequireCI skips the test when err is non-nil, or fails it when running in CI. what
// names the missing dependency ("redis-server", "docker"). A nil err does nothing.
func RequireCI(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if InCI() {
		t.Fatalf("%s is required in CI (run `make deps`): %v", what, err)
	}
	t.Skipf("skipping: %s unavailable (run `make deps`): %v", what, err)
}
