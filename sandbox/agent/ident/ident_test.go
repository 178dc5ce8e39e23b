package ident

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestMain lets the test binary act as a process that took the tool user's fs
// identity: UseToolFS changes every thread, so it runs in a child of its own.
func TestMain(m *testing.M) {
	if dir := os.Getenv("IDENT_TEST_CHILD"); dir != "" {
		if err := child(dir); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child takes uid:gid 4242:4243 as its fs identity, then makes a file as the tool user,
// one in private, and starts a process with Credential.
func child(dir string) error {
	if err := UseToolFS(Tool{UID: 4242, GID: 4243}); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tool"), nil, 0o600); err != nil {
		return err
	}
	if err := Private(func() error { return os.WriteFile(filepath.Join(dir, "private"), nil, 0o600) }); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "after"), nil, 0o600); err != nil {
		return err
	}
	cmd := exec.Command("/bin/sh", "-c", "id -u; id -g; grep CapEff /proc/self/status")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: Credential()}
	out, err := cmd.Output()
	fmt.Print(string(out))
	return err
}

// TestToolIdentity: files the process makes belong to the tool user, except what
// Private makes, which is the process's own, and the identity comes back after it;
// processes started with Credential run as the tool user with no capability.
func TestToolIdentity(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs CAP_SETUID and CAP_SETGID (run as root)")
	}
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "files")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(tmp), tmp, dir} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	// AllThreadsSyscall needs a binary without cgo, as the agent is built.
	bin := os.Args[0]
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_GETPID, 0, 0, 0); e == syscall.ENOTSUP {
		bin = filepath.Join(tmp, "ident.test")
		build := exec.Command("go", "test", "-c", "-o", bin, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build a static test binary: %v\n%s", err, out)
		}
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), "IDENT_TEST_CHILD="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	owners := map[string]string{"tool": "4242:4243", "private": "0:0", "after": "4242:4243"}
	for name, want := range owners {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, name), &st); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%d:%d", st.Uid, st.Gid); got != want {
			t.Errorf("%s is owned by %s, want %s", name, got, want)
		}
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 || lines[0] != "4242" || lines[1] != "4243" || !strings.HasSuffix(lines[2], "0000000000000000") {
		t.Errorf("the started process says %q, want uid 4242, gid 4243 and CapEff 0", lines)
	}
}
