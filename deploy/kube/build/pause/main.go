// Command pause is the sandbox ("infra") container of every pod in the cws-kube
// cluster (scripts/kube.sh): it holds the pod's namespaces open and does nothing else.
// It is the Go twin of Kubernetes' build/pause/linux/pause.c, built from source here
// because this host reaches no image registry (so no registry.k8s.io/pause).
//
// As PID 1 of a pod with a shared process namespace it also reaps orphaned children.
// It exits 0 on SIGINT or SIGTERM, and prints its version for `-v`.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const version = "cws-kube-pause 3.10"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println(version)
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "pause: warning: not running as PID 1")
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "pause: shutting down, got signal %v\n", s)
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
