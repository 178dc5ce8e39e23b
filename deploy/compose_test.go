package deploy_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/version"
)

// TestCompose runs docker-compose.yml for real, as the README tells a new user to:
// build the cws image, bring the stack up, mint a token inside the cws container, call
// tools over MCP into a workspace container, find the session in Redis, restart cws
// and find the session again, then tear everything down and check nothing is left.
//
// It needs Docker, a compose tool (installed from Debian when missing), the workspace
// image and cws-debian:bookworm (make images). It skips locally and fails in CI when
// one is missing.
func TestCompose(t *testing.T) {
	if testing.Short() {
		t.Skip("TestCompose builds images and runs the stack; skipped with -short")
	}
	testenv.Docker(t)
	root := repoRoot(t)
	host := command{dir: root, timeout: 5 * time.Minute}
	for _, img := range []string{"cws-debian:bookworm", version.WorkspaceImage} {
		_, err := host.run(t.Context(), "docker", "image", "inspect", img)
		testenv.RequireCI(t, img+" (make images)", err)
	}
	compose := composeTool(t)

	// Fresh binaries from this tree, and a cws image tagged for this run only.
	suffix := randHex(t, 4)
	bin := t.TempDir()
	for _, pkg := range []string{"cws", "cws-agent"} {
		c := command{dir: root, env: []string{"CGO_ENABLED=0"}, timeout: 5 * time.Minute}
		c.must(t, "go", "build", "-trimpath", "-o", filepath.Join(bin, pkg), "./cmd/"+pkg)
	}
	// The native launcher, as make build makes it (the cws image carries it).
	host.must(t, "cp", testenv.NativeLauncher(t), filepath.Join(bin, testenv.NativeLauncherName))
	image := "cws:" + version.Version + "-test-" + suffix
	t.Cleanup(func() { _, _ = host.run(context.Background(), "docker", "rmi", "-f", image) })
	build := command{dir: root, env: []string{"CWS_IMAGE=" + image, "CWS_BIN_DIR=" + bin}, timeout: 10 * time.Minute}
	t0 := time.Now()
	t.Log(strings.TrimSpace(build.must(t, filepath.Join(root, "scripts", "cws-image.sh"), "cws", "redis")))
	t.Logf("images built in %s", time.Since(t0).Round(time.Millisecond))

	port := freePort(t)
	project := "cws-test-" + suffix
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	stack := command{dir: root, timeout: 5 * time.Minute, env: []string{
		"CWS_IMAGE=" + image,
		"CWS_PORT=" + strconv.Itoa(port),
		"CWS_PUBLIC_URL=" + base,
		"DOCKER_GID=" + socketGID(t),
		"COMPOSE_PROJECT_NAME=" + project,
		// This run's own socket directory, on the host and at the same path in cws.
		"CWS_AGENT_SOCKET_DIR=" + t.TempDir(),
	}}
	dc := func(args ...string) []string {
		return append(append(compose[1:len(compose):len(compose)], "-p", project, "-f", filepath.Join(root, "docker-compose.yml")), args...)
	}
	var sessionID string
	t.Cleanup(func() {
		ctx := context.Background()
		if t.Failed() {
			out, _ := stack.run(ctx, compose[0], dc("logs", "--no-color", "--tail", "80")...)
			t.Logf("compose logs:\n%s", out)
		}
		_, _ = stack.run(ctx, compose[0], dc("down", "-v", "--remove-orphans", "-t", "5")...)
		if sessionID != "" { // a failed run: remove the workspace cws left on the engine
			removeByLabel(ctx, host, "cws.session="+sessionID)
		}
	})

	t0 = time.Now()
	stack.must(t, compose[0], dc("up", "-d")...)
	waitReady(t, base, 2*time.Minute)
	cwsID := strings.TrimSpace(stack.must(t, compose[0], dc("ps", "-q", "cws")...))
	waitHealthy(t, host, cwsID, time.Minute)
	t.Logf("stack up and healthy in %s", time.Since(t0).Round(time.Millisecond))

	// The README's token command, inside the cws container.
	sub := "compose-" + suffix
	token := strings.TrimSpace(stack.must(t, compose[0], dc("exec", "-T", "cws", "/cws", "token",
		"--tenants", "/etc/cws/tenants.yaml", "--tenant", "acme", "--sub", sub, "--ttl", "1h")...))
	if strings.Count(token, ".") != 2 {
		t.Fatalf("cws token printed %q, want a JWT", token)
	}
	hc := &http.Client{Transport: bearer{token: token, base: http.DefaultTransport}, Timeout: 2 * time.Minute}

	content := "written through compose " + suffix + "\n"
	t0 = time.Now()
	withMCP(t, hc, base+"/mcp", func(s *mcp.ClientSession) {
		callTool(t, s, "writeFile", map[string]any{"path": "notes/hello.txt", "contents": content})
		if got := readContent(t, s, "notes/hello.txt"); got != content {
			t.Fatalf("readFile = %q, want %q", got, content)
		}
	})
	t.Logf("MCP writeFile+readFile (session created) in %s", time.Since(t0).Round(time.Millisecond))

	sessionID = onlySession(t, hc, base)
	boxBefore := strings.TrimSpace(host.must(t, "docker", "ps", "-q", "--no-trunc", "--filter", "label=cws.session="+sessionID))
	if boxBefore == "" {
		t.Fatalf("no running workspace container labelled cws.session=%s", sessionID)
	}
	// cws (non-root, in its container) reached the agent over its socket: the workspace
	// has a socket directory, and no `cws-agent attach` bridge ever ran in it.
	if key := strings.TrimSpace(host.must(t, "docker", "inspect", "-f", `{{index .Config.Labels "cws.sockdir"}}`, boxBefore)); key == "" {
		t.Error("the workspace has no socket directory (cws.sockdir): cws took the exec stream")
	}
	if top := host.must(t, "docker", "top", boxBefore, "-eo", "pid,args"); strings.Contains(top, "cws-agent attach") {
		t.Errorf("a docker exec bridge runs in the workspace: cws fell back to the exec stream\n%s", top)
	}

	// Redis holds the session.
	keys := stack.must(t, compose[0], dc("exec", "-T", "redis", "redis-cli", "--scan", "--pattern", "cws:session:*")...)
	if !strings.Contains(keys, "cws:session:acme:"+sessionID) {
		t.Fatalf("Redis has no key cws:session:acme:%s; keys:\n%s", sessionID, keys)
	}

	// Restart cws: the session, its container and its files survive.
	t0 = time.Now()
	stack.must(t, compose[0], dc("restart", "-t", "10", "cws")...)
	waitReady(t, base, 2*time.Minute)
	waitHealthy(t, host, cwsID, time.Minute)
	t.Logf("cws restarted and ready in %s", time.Since(t0).Round(time.Millisecond))
	if id := onlySession(t, hc, base); id != sessionID {
		t.Fatalf("after restart the session is %s, want %s", id, sessionID)
	}
	withMCP(t, hc, base+"/mcp", func(s *mcp.ClientSession) {
		if got := readContent(t, s, "notes/hello.txt"); got != content {
			t.Fatalf("after restart readFile = %q, want %q", got, content)
		}
	})
	boxAfter := strings.TrimSpace(host.must(t, "docker", "ps", "-q", "--no-trunc", "--filter", "label=cws.session="+sessionID))
	if boxAfter != boxBefore {
		t.Errorf("workspace container changed across the restart: %s -> %s", boxBefore, boxAfter)
	}

	// Every metric the dashboard shows is on the live /metrics.
	live := liveMetrics(t, base)
	for _, name := range loadDashboard(t).metricsQueried(live) {
		if !live[name] {
			t.Errorf("dashboard queries %s, missing from the composed cws's /metrics", name)
		}
	}

	// Tear down as the README says: delete the session, then docker compose down -v.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodDelete, base+"/v1/sessions/"+sessionID, nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE /v1/sessions/%s: %s", sessionID, resp.Status)
	}
	stack.must(t, compose[0], dc("down", "-v", "--remove-orphans", "-t", "10")...)
	for _, f := range []string{"label=cws.session=" + sessionID, "label=com.docker.compose.project=" + project} {
		if out := host.must(t, "docker", "ps", "-aq", "--filter", f); strings.TrimSpace(out) != "" {
			t.Errorf("containers left with %s: %s", f, out)
		}
		if out := host.must(t, "docker", "volume", "ls", "-q", "--filter", f); strings.TrimSpace(out) != "" {
			t.Errorf("volumes left with %s: %s", f, out)
		}
	}
	if out := host.must(t, "docker", "network", "ls", "-q", "--filter", "label=com.docker.compose.project="+project); strings.TrimSpace(out) != "" {
		t.Errorf("networks left by project %s: %s", project, out)
	}
	sessionID = ""
}

// composeTool returns the compose command: `docker compose` (v2) or `docker-compose`
// (v1.29+). When neither exists it installs Debian's docker-compose, as the issue asks.
func composeTool(t *testing.T) []string {
	t.Helper()
	c := command{timeout: time.Minute}
	if _, err := c.run(t.Context(), "docker", "compose", "version"); err == nil {
		return []string{"docker", "compose"}
	}
	if _, err := c.run(t.Context(), "docker-compose", "version"); err == nil {
		return []string{"docker-compose"}
	}
	t.Log("no compose tool: installing Debian's docker-compose (apt-get)")
	install := command{env: []string{"DEBIAN_FRONTEND=noninteractive"}, timeout: 10 * time.Minute}
	sudo := []string{}
	if os.Geteuid() != 0 {
		sudo = []string{"sudo", "-n"}
	}
	apt := func(args ...string) error {
		all := append(append([]string{}, sudo...), append([]string{"apt-get"}, args...)...)
		_, err := install.run(t.Context(), all[0], all[1:]...)
		return err
	}
	err := apt("update", "-qq")
	if err == nil {
		err = apt("install", "-y", "-qq", "--no-install-recommends", "docker-compose")
	}
	if err == nil {
		_, err = c.run(t.Context(), "docker-compose", "version")
	}
	testenv.RequireCI(t, "docker compose or docker-compose", err)
	return []string{"docker-compose"}
}

// socketGID is the gid that owns the Docker socket, for DOCKER_GID.
func socketGID(t *testing.T) string {
	t.Helper()
	out := command{timeout: 10 * time.Second}.must(t, "stat", "-c", "%g", "/var/run/docker.sock")
	return strings.TrimSpace(out)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func randHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// waitReady polls /readyz until it answers 200.
func waitReady(t *testing.T, base string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%s %s", resp.Status, body)
		} else {
			last = err.Error()
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("%s/readyz not ready after %s: %s", base, timeout, last)
}

// waitHealthy waits for the container's HEALTHCHECK (`cws healthcheck`) to pass.
func waitHealthy(t *testing.T, host command, id string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	status := ""
	for time.Now().Before(deadline) {
		out, err := host.run(t.Context(), "docker", "inspect", "-f", "{{if .State.Health}}{{.State.Health.Status}}{{end}}", id)
		if err != nil {
			t.Fatal(err)
		}
		if status = strings.TrimSpace(out); status == "healthy" {
			return
		}
		time.Sleep(time.Second)
	}
	log, _ := host.run(t.Context(), "docker", "inspect", "-f", "{{json .State.Health}}", id)
	t.Fatalf("cws container %s is %q after %s, want healthy: %s", id, status, timeout, log)
}

// bearer adds the token to every request.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// withMCP connects the official go-sdk client to endpoint and runs f on the session.
func withMCP(t *testing.T, hc *http.Client, endpoint string, f func(*mcp.ClientSession)) {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "cws-compose-test", Version: version.Version}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("MCP connect %s: %v", endpoint, err)
	}
	defer s.Close()
	f(s)
}

func callTool(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("tools/call %s: isError: %s", name, toolText(res))
	}
	out, ok := res.StructuredContent.(map[string]any)
	if !ok {
		t.Fatalf("tools/call %s: structuredContent is %T, want an object: %s", name, res.StructuredContent, toolText(res))
	}
	return out
}

func readContent(t *testing.T, s *mcp.ClientSession, path string) string {
	t.Helper()
	out := callTool(t, s, "readFile", map[string]any{"path": path})
	content, _ := out["content"].(string)
	return content
}

func toolText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// onlySession lists the caller's sessions over REST and returns the one id.
func onlySession(t *testing.T, hc *http.Client, base string) string {
	t.Helper()
	resp, err := hc.Get(base + "/v1/sessions")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Sessions []struct {
			ID string `json:"id"`
		} `json:"sessions"`
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /v1/sessions: %s %s", resp.Status, body)
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	if len(list.Sessions) != 1 || list.Sessions[0].ID == "" {
		t.Fatalf("GET /v1/sessions = %+v, want one session", list.Sessions)
	}
	return list.Sessions[0].ID
}

// liveMetrics returns the metric family names a running cws serves on /metrics.
func liveMetrics(t *testing.T, base string) map[string]bool {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		// "# TYPE <name> <type>" names every family, whatever its samples.
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// removeByLabel force-removes the containers and volumes with label filter f.
func removeByLabel(ctx context.Context, host command, f string) {
	if out, err := host.run(ctx, "docker", "ps", "-aq", "--filter", "label="+f); err == nil {
		if ids := strings.Fields(out); len(ids) > 0 {
			_, _ = host.run(ctx, "docker", append([]string{"rm", "-f", "-v"}, ids...)...)
		}
	}
	if out, err := host.run(ctx, "docker", "volume", "ls", "-q", "--filter", "label="+f); err == nil {
		if ids := strings.Fields(out); len(ids) > 0 {
			_, _ = host.run(ctx, "docker", append([]string{"volume", "rm", "-f"}, ids...)...)
		}
	}
}
