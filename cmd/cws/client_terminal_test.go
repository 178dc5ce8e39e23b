package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuf is a bytes.Buffer safe for a writer and a reader at once.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestExecPassesTheExitCode(t *testing.T) {
	s := newTestServer(t)
	id := s.create(t)
	out, _, err := s.cli(t, nil, "exec", id, "--", "sh", "-c", "echo from-the-pty; exit 5")
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 5 || !strings.Contains(out, "from-the-pty\r\n") {
		t.Fatalf("exec: err %v, stdout %q; want exit 5", err, out)
	}
	if _, _, err := s.cli(t, nil, "exec", id, "--", "no-such-program-x"); err == nil {
		t.Fatal("exec of a missing program succeeded")
	}
	// The attach is counted, with its bytes, by tenant.
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`cws_terminal_attaches_total{tenant="dev"} 1`, `cws_terminal_bytes_total{direction="out",tenant="dev"}`,
		`cws_terminal_viewer_skips_total{tenant="dev"} 0`, `cws_terminal_open{tenant="dev"} 0`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestAttachDetachesOnTildeDot: what is typed reaches the program, ~. at the start of
// a line detaches and leaves it running, a ~ elsewhere is typed, and cws attach takes
// it back with its scrollback.
func TestAttachDetachesOnTildeDot(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	s := newTestServer(t)
	id := s.create(t)
	c := &client{base: s.url, token: s.token, http: &http.Client{}}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var opened struct{ ID string }
	if err := c.call(ctx, http.MethodPost, sessionPath(id, "terminals"), map[string]any{"command": "bash"}, &opened, nil); err != nil {
		t.Fatal(err)
	}
	in, typed := io.Pipe()
	var out, errOut syncBuf
	done := make(chan error, 1)
	go func() { done <- c.attach(ctx, id, opened.ID, true, false, in, &out, &errOut) }()
	typed.Write([]byte("echo a~b-$((2+3))\r"))
	waitFor(t, &out, "a~b-5")
	typed.Write([]byte("~."))
	if err := <-done; err != nil {
		t.Fatalf("detach: %v", err)
	}
	if !strings.Contains(errOut.String(), "detached from "+opened.ID) {
		t.Fatalf("no detach note: %q", errOut.String())
	}
	// Still running: attach again, see the scrollback, and exit with a code.
	in2, typed2 := io.Pipe()
	var out2 syncBuf
	go func() { done <- c.attach(ctx, id, opened.ID, true, false, in2, &out2, io.Discard) }()
	waitFor(t, &out2, "a~b-5")
	typed2.Write([]byte("exit 4\r"))
	var ee exitError
	if err := <-done; !errors.As(err, &ee) || ee.code != 4 {
		t.Fatalf("attach to the exit: %v", err)
	}
}

func waitFor(t *testing.T, b *syncBuf, s string) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(b.String(), s); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%q never came: %q", s, b.String())
		}
	}
}
