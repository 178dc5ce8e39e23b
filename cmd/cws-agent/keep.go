package main

import (
	"log/slog"
	"os"
	"syscall"

	"github.com/cwsdev/cws/sandbox/agent/server/keep"
)

// runKeep runs the process keeper, which serve starts on the first background process
// (package keep).
func runKeep(args []string) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", "cws-agent keep")
	return keep.Main(args, log)
}

// recordExit hands the keeper the wait status of a process init reaped: a background
// process reparented to init because its serve died first has a marker waiting for it;
// for any other process this costs one failed open.
func recordExit(pid int, st syscall.WaitStatus) { keep.RecordExit(procDir(), pid, st) }
