package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// attachWait is how long attach waits for the agent to listen (a container just started).
const attachWait = 15 * time.Second

// runAttach copies stdin to the agent's socket and the socket to stdout, byte for byte.
func runAttach(args []string) error {
	var conn *net.UnixConn
	deadline := time.Now().Add(attachWait)
	for {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socketName, Net: "unix"})
		if err == nil {
			conn = c
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agent not listening on %s after %s: %w", socketName, attachWait, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(conn, os.Stdin)
		_ = conn.CloseWrite()
		done <- err
	}()
	go func() {
		_, err := io.Copy(os.Stdout, conn)
		done <- err
	}()
	err := <-done
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return err
}
