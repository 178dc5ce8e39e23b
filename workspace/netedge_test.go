package workspace_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/cwsdev/cws/workspace"
)

// TestDialPortCap: a session's open connections to its ports are capped
// (Config.MaxPortConns); past it DialPort is ErrQuota, naming the flag, and a closed
// connection gives its place back. Another session has its own count.
func TestDialPortCap(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c) }() // an echo: the connection stays open
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	l := newLifeEnvWith(t, fmt.Sprintf(`{"previewPorts": [%d]}`, port), func(c *workspace.Config) { c.MaxPortConns = 3 })
	ctx := context.Background()

	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for i := range 3 {
		c, err := l.svc.DialPort(ctx, l.caller, l.id, port)
		if err != nil {
			t.Fatalf("connection %d of 3: %v", i+1, err)
		}
		open = append(open, c)
	}
	_, err = l.svc.DialPort(ctx, l.caller, l.id, port)
	if !errors.Is(err, workspace.ErrQuota) || !containsAll(err.Error(), "3 connections", "--preview-max-conns") {
		t.Fatalf("a 4th connection: %v, want ErrQuota naming the cap and the flag", err)
	}
	// Each connection still works; closing one makes room.
	if _, err := open[0].Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(open[0], buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through a capped session: %q, %v", buf, err)
	}
	open[0].Close()
	open[0].Close() // twice: gives back one place, not two
	c, err := l.svc.DialPort(ctx, l.caller, l.id, port)
	if err != nil {
		t.Fatalf("after a close: %v", err)
	}
	open[0] = c
	if _, err := l.svc.DialPort(ctx, l.caller, l.id, port); !errors.Is(err, workspace.ErrQuota) {
		t.Fatalf("a double close freed two places: %v", err)
	}

	// Another session of the tenant is not held back by this one's.
	other, err := l.svc.CreateSession(ctx, l.caller, workspace.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := l.svc.DialPort(ctx, l.caller, other.ID, port)
	if err != nil {
		t.Fatalf("another session: %v", err)
	}
	c2.Close()
}
