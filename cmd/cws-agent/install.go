package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cwsdev/cws/sandbox/agent"
)

// runInstall is what an engine without volumes of its own runs before the sandbox's
// first container: the Kubernetes driver's init container (the cws image) runs
// `cws-agent install <dir>`, which copies this binary into dir (an emptyDir that the
// workspace container mounts read-only at /.cws) and moves the socket secret from its
// own environment (CWS_AGENT_SECRET, the init container's alone) into
// /.cws-run/secret (0400), where the agent's init takes it and removes it. The
// workspace container's environment never holds the secret, so no `kubectl exec`
// inherits it.
func runInstall(args []string) error {
	if len(args) != 1 || args[0] == "" || args[0][0] != '/' {
		return errors.New("usage: cws-agent install <absolute directory>")
	}
	dir := args[0]
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer self.Close()
	dst := filepath.Join(dir, "cws-agent")
	tmp, err := os.CreateTemp(dir, ".cws-agent-*")
	if err != nil {
		return fmt.Errorf("install into %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, self); err != nil {
		tmp.Close()
		return fmt.Errorf("install into %s: %w", dir, err)
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("install into %s: %w", dir, err)
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
