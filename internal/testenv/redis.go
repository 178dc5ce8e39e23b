package testenv

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RedisURLEnv names the variable that points tests at an existing Redis.
const RedisURLEnv = "CWS_TEST_REDIS_URL"

// Redis returns the URL of a Redis server for the test. It uses $CWS_TEST_REDIS_URL
// when set; otherwise it starts a private redis-server (from PATH) on a free loopback
// port with persistence off, waits until it answers PING, and stops it when the test
// ends. Without redis-server it skips locally and fails in CI. Tests sharing one
// server (CWS_TEST_REDIS_URL) should use their own key prefix.
func Redis(t testing.TB) string {
	t.Helper()
	if url := os.Getenv(RedisURLEnv); url != "" {
		return url
	}
	url, _ := OwnRedis(t)
	return url
}

// OwnRedis always starts a private redis-server, even with $CWS_TEST_REDIS_URL set, and
// returns its URL and process, for tests that inject faults into it (SIGSTOP to freeze
// it, SIGCONT to thaw it). Without redis-server it skips locally and fails in CI.
func OwnRedis(t testing.TB) (string, *os.Process) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	RequireCI(t, "redis-server", err)

	port, err := freePort()
	if err != nil {
		t.Fatalf("testenv: pick a port for redis-server: %v", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var out syncBuffer
	cmd := exec.Command(bin,
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--save", "",
		"--appendonly", "no",
		"--dir", t.TempDir(),
	)
	cmd.Stdout, cmd.Stderr = &out, &out
	dieWithParent(cmd) // t.Cleanup does not run when a test binary times out
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: start redis-server: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a test may have frozen it
		_ = cmd.Process.Kill()
		<-exited
	})

	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := ping(addr); err == nil {
			return "redis://" + addr + "/0", cmd.Process
		} else if time.Now().After(deadline) {
			t.Fatalf("testenv: redis-server on %s did not answer PING: %v\n%s", addr, err, out.String())
		}
		select {
		case <-exited:
			t.Fatalf("testenv: redis-server exited early:\n%s", out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// freePort asks the kernel for an unused loopback port. Another process could take
// it before redis-server binds it; that shows up as an early exit, not a hang.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ping speaks just enough RESP to see "+PONG", so testenv needs no Redis client.
func ping(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

// syncBuffer collects the server's output for failure messages.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
