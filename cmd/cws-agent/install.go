package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/launch"
)

// runInstall is what an engine without volumes of its own runs before the sandbox's
// first container: the Kubernetes driver's init container (the cws image) runs
// `cws-agent install <dir>`, which copies this binary, and the native launcher beside
// it (cws-launch, when the image has it), into dir (an emptyDir that the workspace
// container mounts read-only at /.cws) and moves the socket secret from its
// own environment (CWS_AGENT_SECRET, the init container's alone) into
// /.cws-run/secret (0400), where the agent's init takes it and removes it. The
// workspace container's environment never holds the secret, so no `kubectl exec`
// inherits it.
func runInstall(args []string) error {
	if len(args) != 1 || args[0] == "" || args[0][0] != '/' {
		return errors.New("usage: cws-agent install <absolute directory>")
	}
	dir := args[0]
	dst := filepath.Join(dir, "cws-agent")
	if err := installFile("/proc/self/exe", dst); err != nil {
		return fmt.Errorf("install into %s: %w", dir, err)
	}
	// The native launcher, when the image has it beside the agent (launch.Native).
	if exe, err := os.Executable(); err == nil {
		src := filepath.Join(filepath.Dir(exe), launch.NativeName)
		if err := installFile(src, filepath.Join(dir, launch.NativeName)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("install %s into %s: %w", launch.NativeName, dir, err)
		} else if err == nil {
			fmt.Printf("%s installed at %s\n", launch.NativeName, filepath.Join(dir, launch.NativeName))
		}
	}
	if secret := os.Getenv(agent.EnvSecret); secret != "" {
		p := filepath.Join(agent.RunDir, agent.SecretFile)
		os.Remove(p) // a restarted pod's init container writes it anew
		if err := os.WriteFile(p, []byte(secret), 0o400); err != nil {
			return fmt.Errorf("agent secret: %w", err)
		}
	}
	fmt.Printf("cws-agent installed at %s\n", dst)
	return nil
}

// installFile copies src to dst (mode 0555) through a temporary file in dst's directory
// and a rename, as the agent itself is installed.
func installFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
