package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent"
)

// handoffChild is the test binary as a serve: it takes what init handed over and
// prints it as JSON.
func init() {
	if os.Getenv("CWS_HANDOFF_TEST") != "1" {
		return
	}
	in, err := takeInherited()
	out := map[string]any{"sameUID": in.sameUID, "secret": in.secrets.Secret, "keeperKey": in.secrets.KeeperKey,
		"envMode": os.Getenv(envMode), "envFDs": os.Getenv(envFDs), "dumpable": dumpable()}
	if err != nil {
		out["err"] = err.Error()
	}
	if in.tcp != nil {
		out["tcp"] = in.tcp.Addr().String()
	}
	if in.unix != nil {
		out["unix"] = in.unix.Addr().String()
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
	os.Exit(0)
}

// TestHandoff: what init holds reaches the serve it starts (secrets through a pipe,
// the listeners as descriptors), and the traces of it leave serve's environment.
func TestHandoff(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tf, err := tl.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer tf.Close()
	name := fmt.Sprintf("@cws-handoff-test-%d", os.Getpid())
	ul, err := net.Listen("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	uf, err := ul.(*net.UnixListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer uf.Close()
	h := handoff{sameUID: true, secrets: secrets{Secret: "s3cret", KeeperKey: "k3y"}, tcp: tf, unix: uf}

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "CWS_HANDOFF_TEST=1")
	done, err := h.prepare(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if env := strings.Join(cmd.Env, "\n"); strings.Contains(env, "s3cret") || strings.Contains(env, "k3y") {
		t.Fatalf("a secret is in serve's environment: %q", cmd.Env)
	}
	out, err := cmd.Output()
	done()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := map[string]any{"sameUID": true, "secret": "s3cret", "keeperKey": "k3y", "envMode": "", "envFDs": "",
		"tcp": tl.Addr().String(), "unix": name}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("serve got %s = %v, want %v (all: %s)", k, got[k], w, out)
		}
	}
	tl.Close()
	ul.Close()

	// Root mode hands over the TCP listener alone, and no mode.
	cmd = exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "CWS_HANDOFF_TEST=1")
	h = handoff{tcp: tf}
	if _, err := h.prepare(cmd); err != nil {
		t.Fatal(err)
	}
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if err := json.Unmarshal(out, &got); err != nil || got["sameUID"] != false || got["secret"] != "" || got["tcp"] == nil {
		t.Errorf("root mode's serve got %s", out)
	}
}

// TestTakeSecretFile: the secret is read and its file removed; a symlink or a FIFO in
// its place is neither followed nor waited on.
func TestTakeSecretFile(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	p := filepath.Join(dir, agent.SecretFile)
	if err := os.WriteFile(p, []byte("abc123\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	if s, err := takeSecretFile(log, p); err != nil || s != "abc123" {
		t.Errorf("takeSecretFile = %q, %v", s, err)
	}
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Errorf("the secret file is still there: %v", err)
	}
	if s, err := takeSecretFile(log, p); err != nil || s != "" {
		t.Errorf("no file: %q, %v", s, err)
	}
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("planted"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	if s, err := takeSecretFile(log, p); err != nil || s != "" {
		t.Errorf("a symlink: %q, %v; want no secret", s, err)
	}
	os.Remove(p)
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := takeSecretFile(log, p); err != nil || s != "" {
		t.Errorf("a FIFO: %q, %v; want no secret", s, err)
	}
}
