package main

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Resource limits an engine without ulimits hands to init (the Kubernetes driver: a pod
// has no ulimit field). Init sets each on itself, soft and hard, before it starts
// anything, so that serve, the keeper and every tool process inherit it: what Docker's
// --ulimit does. Lowering a limit needs no privilege; raising one past the hard limit
// would, and is refused.
var rlimitEnv = []struct {
	name     string
	resource int
}{
	{"CWS_RLIMIT_NOFILE", unix.RLIMIT_NOFILE},
	{"CWS_RLIMIT_FSIZE", unix.RLIMIT_FSIZE},
}

func applyRlimits() error {
	for _, r := range rlimitEnv {
		v := os.Getenv(r.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return fmt.Errorf("%s=%q: want a positive whole number", r.name, v)
		}
		if err := unix.Setrlimit(r.resource, &unix.Rlimit{Cur: n, Max: n}); err != nil {
			return fmt.Errorf("%s=%d: setrlimit: %w", r.name, n, err)
		}
		os.Unsetenv(r.name)
	}
	return nil
}
