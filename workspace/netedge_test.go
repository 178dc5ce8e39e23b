package workspace_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/policy"
)

// TestHoldPortCap: a session's exchanges with its ports are capped (Config.MaxPortConns);
// past it HoldPort is ErrQuota, naming the flag; a release gives its place back, once;
// connections themselves (DialPort, which a pool may keep idle) hold no place; another
// session has its own count.
func TestHoldPortCap(t *testing.T) {
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

	var held []func()
	for i := range 3 {
		release, err := l.svc.HoldPort(ctx, l.caller, l.id, port)
		if err != nil {
			t.Fatalf("exchange %d of 3: %v", i+1, err)
		}
		held = append(held, release)
	}
	_, err = l.svc.HoldPort(ctx, l.caller, l.id, port)
	if !errors.Is(err, workspace.ErrQuota) || !containsAll(err.Error(), "3 exchanges", "--preview-max-conns") {
		t.Fatalf("a 4th exchange: %v, want ErrQuota naming the cap and the flag", err)
	}
	// Connections are not exchanges: a full session still dials (its pool's idle ones).
	conn, err := l.svc.DialPort(ctx, l.caller, l.id, port)
	if err != nil {
		t.Fatalf("DialPort with every place held: %v", err)
	}
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo: %q, %v", buf, err)
	}
	conn.Close()

	held[0]()
	held[0]() // twice: gives back one place, not two
	if held[0], err = l.svc.HoldPort(ctx, l.caller, l.id, port); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := l.svc.HoldPort(ctx, l.caller, l.id, port); !errors.Is(err, workspace.ErrQuota) {
		t.Fatalf("a double release freed two places: %v", err)
	}

	// Another session of the tenant is not held back by this one's.
	other, err := l.svc.CreateSession(ctx, l.caller, workspace.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	release, err := l.svc.HoldPort(ctx, l.caller, other.ID, port)
	if err != nil {
		t.Fatalf("another session: %v", err)
	}
	release()
	// A port the policy doesn't list is refused before any place is taken.
	if _, err := l.svc.HoldPort(ctx, l.caller, other.ID, port+1); !errors.Is(err, policy.ErrPolicy) {
		t.Fatalf("an unlisted port: %v, want policy.ErrPolicy", err)
	}
	for _, r := range held {
		r()
	}
}
