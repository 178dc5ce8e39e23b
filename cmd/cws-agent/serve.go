package main

import (
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/cwsdev/cws/sandbox/agent/server"
	"github.com/cwsdev/cws/version"
)

// warmThreads is how many OS threads the agent creates up front. Under a fork bomb the
// pids limit leaves no room for new threads, and a Go program that cannot create one
// dies; threads made early are kept and reused, so the agent keeps answering.
const warmThreads = 12

// stateDir keeps the outcomes of recent requests on the container's /tmp, so that they
// survive this process being killed and restarted by init (server.Config.StateDir).
const stateDir = "/tmp/.cws-agent/requests"

func runServe(args []string) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", "cws-agent")
	warmUp()
	root := os.Getenv("CWS_WORKSPACE")
	self, err := os.Executable()
	if err != nil {
		return err
	}
	srv, err := server.New(server.Config{Root: root, Version: version.Version, Log: log, Launcher: self, StateDir: stateDir})
	if err != nil {
		return err
	}
	if abi := srv.Landlock(); abi > 0 {
		log.Info("command allowlists are enforced with Landlock", "landlock_abi", abi)
	} else {
		log.Warn("Landlock is unavailable: commands of a policy with allowedCommands run unenforced (or are refused under requireLandlock)")
	}
	l, err := net.Listen("unix", socketName)
	if err != nil {
		return err
	}
	log.Info("agent listening", "socket", socketName, "uid", os.Getuid(), "version", version.Version)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		l.Close()
		srv.Close()
	}()
	return srv.Serve(l)
}

func warmUp() {
	var wg sync.WaitGroup
	for range warmThreads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			time.Sleep(5 * time.Millisecond)
			runtime.UnlockOSThread()
		}()
	}
	wg.Wait()
}
