package main

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

func TestParseMemoryLimit(t *testing.T) {
	for in, want := range map[string]int64{
		"536870912\n":           536870912,
		"max\n":                 0,
		"9223372036854771712\n": 0, // cgroup v1: no limit
		"":                      0,
		"-1":                    0,
	} {
		if got := parseMemoryLimit(in); got != want {
			t.Errorf("parseMemoryLimit(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestTuneGC(t *testing.T) {
	prevGC, prevLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(prevGC); debug.SetMemoryLimit(prevLimit) })
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	limit := func(n int64) func() int64 { return func() int64 { return n } }

	gogc, ml := tuneGC(env(nil), limit(512<<20))
	if gogc != defaultGOGC || debug.SetGCPercent(100) != defaultGOGC {
		t.Errorf("GOGC unset: set %d, want %d", gogc, defaultGOGC)
	}
	if ml != 384<<20 || debug.SetMemoryLimit(-1) != 384<<20 {
		t.Errorf("GOMEMLIMIT unset, cgroup limit 512 MiB: set %d, want 384 MiB", ml)
	}
	debug.SetMemoryLimit(prevLimit)

	gogc, ml = tuneGC(env(map[string]string{"GOGC": "100", "GOMEMLIMIT": "1GiB"}), limit(512<<20))
	if gogc != -1 || ml != -1 {
		t.Errorf("GOGC and GOMEMLIMIT set: tuneGC set %d, %d; want both left alone", gogc, ml)
	}
	if _, ml = tuneGC(env(nil), limit(0)); ml != -1 {
		t.Errorf("no cgroup limit: set GOMEMLIMIT %d, want none", ml)
	}
}

func TestLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:6061": true, "[::1]:6061": true, "localhost:6061": true,
		"0.0.0.0:6061": false, ":6061": false, "10.0.0.1:6061": false, "example.com:6061": false, "127.0.0.1": false,
	} {
		if got := loopbackAddr(addr); got != want {
			t.Errorf("loopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestStartDebugRefusesNonLoopback(t *testing.T) {
	var buf bytes.Buffer
	startDebug("0.0.0.0:0", bootLogger([]string{"--log-format=json"}, func(string) string { return "" }, &buf))
	if !strings.Contains(buf.String(), `"level":"WARN"`) || !strings.Contains(buf.String(), "ignored") {
		t.Errorf("startDebug(0.0.0.0:0) logged %q, want a JSON warning that it is ignored", buf.String())
	}
}
