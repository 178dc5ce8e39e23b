package launch

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain makes the test binary a launcher when asked to (CWS_LAUNCH_TEST=1), so the
// real restriction runs in a child process and never in the test process itself.
func TestMain(m *testing.M) {
	if os.Getenv("CWS_LAUNCH_TEST") == "1" {
		err := Main(os.Args[1:])
		os.Stderr.WriteString("launch: " + err.Error() + "\n")
		os.Exit(126)
	}
	os.Exit(m.Run())
}

// TestLaunchHost restricts a child on the host's kernel: the allowed program runs, and
// a program it starts that was not allowed is refused. Skipped where Landlock is
// unavailable (the container tests in sandbox/docker and e2e cover CI).
func TestLaunchHost(t *testing.T) {
	if ABI() == 0 {
		t.Skip("Landlock unavailable on this kernel")
	}
	env, err := exec.LookPath("env")
	if err != nil {
		t.Skip("no env on this host")
	}
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	run := func(args ...string) (string, error) {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "CWS_LAUNCH_TEST=1")
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	if out, err := run("-p", "env", "--", env, "env", "true"); err == nil || !strings.Contains(strings.ToLower(out), "permission denied") {
		t.Errorf("env true with only env allowed: err %v, output %q; want true refused", err, out)
	}
	if out, err := run("-p", "env", "-p", "true", "--", env, "env", "true"); err != nil {
		t.Errorf("env true with env and true allowed: %v: %s", err, out)
	}
	if out, err := run("-p", "env", "--", env, "env", "sh", "-c", "touch "+marker); err == nil {
		t.Errorf("env sh -c touch ran: %s", out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the marker was created: sh ran")
	}
	if out, err := run("-p", "env", "--", "/bin/sh", "sh", "-c", "true"); err == nil || !strings.Contains(out, "exec sh: permission denied") {
		t.Errorf("launching a program not allowed: err %v, output %q", err, out)
	}

	// The status descriptor carries the refusal, and reads EOF once the command runs.
	status := func(args ...string) string {
		r, w, err := os.Pipe()
		must(t, err)
		defer r.Close()
		cmd := exec.Command(os.Args[0], append([]string{"-status-fd", "3"}, args...)...)
		cmd.Env = append(os.Environ(), "CWS_LAUNCH_TEST=1")
		cmd.ExtraFiles = []*os.File{w}
		err = cmd.Start()
		w.Close()
		must(t, err)
		msg, _ := io.ReadAll(r)
		_ = cmd.Wait()
		return string(msg)
	}
	if msg := status("-p", "env", "--", "/bin/sh", "sh", "-c", "true"); msg != "exec sh: permission denied" {
		t.Errorf("status of a program not allowed: %q", msg)
	}
	if msg := status("-p", "env", "-p", "true", "--", env, "env", "true"); msg != "" {
		t.Errorf("status of an allowed program: %q, want nothing", msg)
	}
}
