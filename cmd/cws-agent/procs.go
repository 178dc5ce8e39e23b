package main

import (
	"os"
	"runtime"
	"time"

	"github.com/cwsdev/cws/sandbox/agent/server/cpulimit"
)

// The Go runtime sizes GOMAXPROCS from the container's CPU limit, but never below 2.
// A workspace is usually limited to one CPU, and an agent with two Ps under a one-CPU
// quota hands every call between threads that the quota then throttles: with 50 busy
// sessions, GOMAXPROCS 1 cuts the agent's CPU per call by about a fifth. So the agent
// follows the limit down to 1, and re-reads it, because `docker update` changes it on a
// running container (a warm-pool container takes its tenant's limits at hand-out).
// GOMAXPROCS in the environment, set by an operator, wins.

// procsEvery is how often the CPU limit is read again.
const procsEvery = 10 * time.Second

// followCPULimit sets GOMAXPROCS from the cgroup's CPU limit now and every procsEvery.
func followCPULimit() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	set := func() {
		if n := cpulimit.CPUs(); n > 0 {
			runtime.GOMAXPROCS(min(n, runtime.NumCPU()))
		}
	}
	set()
	go func() {
		for range time.Tick(procsEvery) {
			set()
		}
	}()
}
