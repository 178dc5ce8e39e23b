package workspace

import (
	"os/exec"
	"strings"
	"testing"
)

// TestGitHelper: git, with only the environment a sandbox gets, answers the placeholder
// for the secret's hosts (any port, any depth below a wildcard) and nothing elsewhere.
func TestGitHelper(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	env := []string{"HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "TOKEN=cws-secret-TOKEN-abc",
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=credential.helper",
		"GIT_CONFIG_VALUE_0=" + gitHelper("TOKEN", []string{"git.test:8443", "*.example.org", "[::1]:443"}),
		"GIT_TERMINAL_PROMPT=0", "PATH=/usr/bin:/bin"}
	for host, want := range map[string]bool{"git.test": true, "git.test:8443": true, "a.b.example.org": true,
		"example.org": false, "other.test": false, "evilgit.test": false} {
		cmd := exec.Command("git", "credential", "fill")
		cmd.Env = env
		cmd.Stdin = strings.NewReader("protocol=https\nhost=" + host + "\n\n")
		out, _ := cmd.CombinedOutput()
		got := strings.Contains(string(out), "password=cws-secret-TOKEN-abc") && strings.Contains(string(out), "username=x-access-token")
		if got != want {
			t.Errorf("host %s: %q, want the placeholder: %v", host, out, want)
		}
	}
}
