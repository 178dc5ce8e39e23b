package testenv

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// NativeLauncherName is the native launcher's file name (launch.NativeName).
const NativeLauncherName = "cws-launch"

var native struct {
	once sync.Once
	path string
	err  error
}

// NativeLauncher builds the agent's native launcher (sandbox/agent/launcher/cws-launch.c)
// with the host's C compiler, as `make build` does, once per test binary, and returns
// its path. Without a C compiler the test is skipped, or fails in CI (make deps installs
// gcc).
func NativeLauncher(t testing.TB) string {
	t.Helper()
	native.once.Do(func() {
		_, here, _, _ := runtime.Caller(0)
		src := filepath.Join(filepath.Dir(here), "..", "..", "sandbox", "agent", "launcher", "cws-launch.c")
		cc, err := exec.LookPath("cc")
		if err != nil {
			native.err = err
			return
		}
		dir, err := os.MkdirTemp("", "cws-launch-test-")
		if err != nil {
			native.err = err
			return
		}
		native.path = filepath.Join(dir, NativeLauncherName)
		if out, err := exec.Command(cc, "-static", "-O2", "-o", native.path, src).CombinedOutput(); err != nil {
			native.err = errors.New(err.Error() + ": " + string(out))
		}
	})
	RequireCI(t, "a C compiler with a static libc for cws-launch (gcc, libc6-dev)", native.err)
	return native.path
}
