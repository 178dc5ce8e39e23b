package agent_test

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"github.com/cwsdev/cws/sandbox/agent/server"
)

// BenchmarkReadFile4K is readFile's agent round trip: the host's client and the agent's
// server in one process over a unix socket pair, with a guard and the hash, as the
// readFile tool asks. Profile it to see what one call costs each side.
func BenchmarkReadFile4K(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f4k"), []byte(strings.Repeat("0123456789abcdef", 256)), 0o644); err != nil {
		b.Fatal(err)
	}
	srv, err := server.New(server.Config{Root: dir, Version: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	dial := func(ctx context.Context) (io.ReadWriteCloser, error) {
		fds, err := socketpair()
		if err != nil {
			return nil, err
		}
		go srv.ServeConn(fds[1])
		return fds[0], nil
	}
	c := agent.NewClient(dial, "bench", nil)
	defer c.Close()
	g := &guard.Guard{Deny: []string{".env", "**/*.pem", "secrets/**"}}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		data, _, err := c.ReadFile(ctx, agent.ReadArgs{Path: "f4k", Hash: true, Guard: g, MaxSize: 1 << 20})
		if err != nil || len(data) != 4096 {
			b.Fatalf("read: %d bytes, %v", len(data), err)
		}
	}
}

func socketpair() ([2]net.Conn, error) {
	l, err := net.Listen("unix", filepath.Join(os.TempDir(), "cws-bench-"+strings.ReplaceAll(filepath.Base(os.TempDir()), "/", "")+".sock"))
	if err != nil {
		return [2]net.Conn{}, err
	}
	defer l.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		ch <- c
	}()
	a, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		return [2]net.Conn{}, err
	}
	return [2]net.Conn{a, <-ch}, nil
}
