package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// Process-wide settings of `cws serve`, applied before the command runs (init), from
// the environment. They are the Go runtime's, so they act before any flag is read.
//
//	GOGC        unset: 400 (Go's default is 100). cws's live heap is small (about
//	            10 MB with 50 sessions) while each tool call allocates tens of KB, so
//	            at 100 the collector ran some 15 times a second under load and took
//	            about a tenth of cws's CPU; at 400 it runs about a quarter as often,
//	            for a heap of a few tens of MB more. Set GOGC to choose another value
//	            (GOGC=100 restores Go's default).
//	GOMEMLIMIT  unset, and cws in a cgroup with a memory limit (a container, a pod):
//	            3/4 of that limit, so that the higher GOGC never takes the heap past
//	            the limit: near it the collector runs as often as it must. Without a
//	            limit, none. Set GOMEMLIMIT to choose (GOMEMLIMIT=off for none).
//	CWS_PPROF_ADDR  a loopback host:port (e.g. 127.0.0.1:6061) where serve answers
//	            /debug/pprof/ (CPU, heap, allocs, goroutines) for profiling; unset,
//	            the default, starts nothing. Any other host is refused: profiles show
//	            request data, and the listener has no auth.
//
// /metrics shows the values in effect (go_gc_gogc_percent, go_gc_gomemlimit_bytes).

// defaultGOGC is serve's GOGC when the environment sets none.
const defaultGOGC = 400

func init() {
	if len(os.Args) < 2 || os.Args[1] != "serve" {
		return
	}
	tuneGC(os.Getenv, readCgroupMemoryLimit)
	if addr := os.Getenv("CWS_PPROF_ADDR"); addr != "" {
		startDebug(addr, bootLogger(os.Args[2:], os.Getenv, os.Stderr))
	}
}

// tuneGC applies serve's GOGC and GOMEMLIMIT defaults where getenv sets none, and
// returns what it set (-1: left alone).
func tuneGC(getenv func(string) string, cgroupLimit func() int64) (gogc int, memLimit int64) {
	gogc, memLimit = -1, -1
	if getenv("GOGC") == "" {
		gogc = defaultGOGC
		debug.SetGCPercent(gogc)
	}
	if getenv("GOMEMLIMIT") == "" {
		if l := cgroupLimit(); l > 0 {
			memLimit = l / 4 * 3
			debug.SetMemoryLimit(memLimit)
		}
	}
	return gogc, memLimit
}

// readCgroupMemoryLimit returns the memory limit of the cgroup cws runs in, as a
// container sees it (cgroup v2, then v1), or 0 when there is none.
func readCgroupMemoryLimit() int64 {
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		return parseMemoryLimit(string(b))
	}
	return 0
}

// parseMemoryLimit reads a cgroup memory limit file's value: bytes, or "max" (v2) or
// a huge number (v1's page-rounded int64 max) for none, which give 0.
func parseMemoryLimit(s string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 || n >= 1<<50 { // "max", or v1's "no limit"
		return 0
	}
	return n
}

// bootLogger is a logger for what happens before serve's own exists, in the format
// serve's will have (--log-format, CWS_LOG_FORMAT).
func bootLogger(args []string, getenv func(string) string, w io.Writer) *slog.Logger {
	format := getenv("CWS_LOG_FORMAT")
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--log-format="); ok {
			format = v
		} else if a == "--log-format" && i+1 < len(args) {
			format = args[i+1]
		}
	}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

// startDebug serves net/http/pprof on addr, which must be a loopback address, on a
// mux of its own (never the API's).
func startDebug(addr string, log *slog.Logger) {
	if !loopbackAddr(addr) {
		log.Warn("CWS_PPROF_ADDR ignored: want a loopback host:port such as 127.0.0.1:6061", "addr", addr)
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Warn("CWS_PPROF_ADDR: no debug listener", "err", err)
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	log.Info("pprof debug listener (CWS_PPROF_ADDR)", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	go func() { _ = (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(ln) }()
}

// loopbackAddr reports whether addr is host:port with a loopback host.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
