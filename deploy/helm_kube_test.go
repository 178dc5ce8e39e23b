package deploy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/version"
)

// TestHelmKube installs the chart with driver=kubernetes into the local cluster
// (scripts/kube.sh) and uses it: cws runs in a pod with the chart's ServiceAccount and
// Role, a REST call creates a session, whose hardened pod appears in the sessions'
// namespace, and tool calls go through it (the direct transport: cws dials the pod's IP).
//
// The images are the current tree's: `make build`, scripts/cws-image.sh (cws, and
// cws-redis for the bundled Redis when missing), `make images`' cws-workspace, all
// imported into the cluster's containerd (no registry is reachable). Everything the
// test makes (the release, its namespace and the sessions' namespace) is deleted again;
// the cluster stays up.
//
// It runs only with CWS_KUBE=1 or CI=true, like TestKube.
func TestHelmKube(t *testing.T) {
	if os.Getenv("CWS_KUBE") != "1" && !testenv.InCI() {
		t.Skip("skipping: needs the local Kubernetes cluster, whose first build takes ~15 min; " +
			"run `make kube`, then CWS_KUBE=1 go test ./deploy -run TestHelmKube")
	}
	if os.Geteuid() != 0 {
		_, err := exec.LookPath("sudo")
		testenv.RequireCI(t, "root or sudo (scripts/kube.sh runs containerd and kubelet)", err)
	}
	testenv.Docker(t) // the images are built with, and exported from, the local engine
	hc, helmBin := helm(t)
	root := repoRoot(t)
	start := time.Now()
	phase := func(what string, t0 time.Time) { t.Logf("%-28s %6.1fs", what, time.Since(t0).Seconds()) }

	// The cluster: `up` is idempotent, seconds when it runs already.
	t0 := time.Now()
	sh := command{dir: root, timeout: 80 * time.Minute}
	kubeSh := filepath.Join(root, "scripts", "kube.sh")
	out, err := sh.run(t.Context(), kubeSh, "up")
	testenv.RequireCI(t, "the local cluster (scripts/kube.sh up, i.e. make kube)", err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	kubeconfig, ok := strings.CutPrefix(lines[len(lines)-1], "KUBECONFIG=")
	if !ok {
		t.Fatalf("last line of scripts/kube.sh up is %q, want KUBECONFIG=<path>", lines[len(lines)-1])
	}
	kubectl := filepath.Join(filepath.Dir(kubeconfig), "kubectl")
	phase("cluster up", t0)

	k := command{dir: root, timeout: 3 * time.Minute, env: []string{"KUBECONFIG=" + kubeconfig}}
	kc := func(args ...string) string { t.Helper(); return k.must(t, kubectl, args...) }

	// The sessions' store: the bundled Redis (of cws-redis, built here) where cws can
	// resolve its Service's name; the local cluster has no DNS (no CoreDNS image), so
	// there it is the embedded store (redis.enabled=false, one replica).
	bundledRedis := true
	if _, err := k.run(t.Context(), kubectl, "-n", "kube-system", "get", "service", "kube-dns"); err != nil {
		bundledRedis = false
		t.Log("the cluster has no DNS (no kube-system/kube-dns Service), so cws could not resolve the bundled " +
			"Redis's Service name: installing with redis.enabled=false (the embedded store) instead")
	} else {
		t.Log("sessions' store: the bundled Redis (cws-redis)")
	}

	// The images, from this tree.
	t0 = time.Now()
	sh.timeout = 10 * time.Minute
	sh.must(t, "make", "build")
	sh.must(t, filepath.Join(root, "scripts", "cws-image.sh"), "cws")
	images := []string{"cws:" + version.Version, version.WorkspaceImage}
	redisImage := "cws-redis:" + version.Version
	if bundledRedis {
		if exec0(t, "docker", "image", "inspect", redisImage) != nil {
			_, err := sh.run(t.Context(), filepath.Join(root, "scripts", "cws-image.sh"), "redis")
			testenv.RequireCI(t, redisImage+" (scripts/cws-image.sh redis, which needs the Debian mirror)", err)
		}
		images = append(images, redisImage)
	}
	testenv.RequireCI(t, version.WorkspaceImage+" (make images)", exec0(t, "docker", "image", "inspect", version.WorkspaceImage))
	phase("build images", t0)
	t0 = time.Now()
	sh.timeout = 20 * time.Minute
	sh.must(t, kubeSh, append([]string{"import"}, images...)...)
	phase("import images", t0)

	// A fresh namespace for the release; the chart makes the sessions' one.
	suffix := strconv.FormatInt(time.Now().UnixNano()%1_000_000, 10)
	ns := "cws-helm-" + suffix
	sessionsNS := ns + "-sessions"
	const release = "cws"
	hk := command{dir: hc.dir, timeout: 6 * time.Minute, env: []string{"KUBECONFIG=" + kubeconfig}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		t0 := time.Now()
		if _, err := hk.run(ctx, helmBin, "uninstall", release, "-n", ns, "--wait", "--timeout", "2m"); err != nil {
			t.Logf("cleanup: %v", err)
		}
		for _, n := range []string{sessionsNS, ns} {
			if _, err := k.run(ctx, kubectl, "delete", "namespace", n, "--ignore-not-found", "--wait=true", "--timeout=120s"); err != nil {
				t.Logf("cleanup: %v", err)
			}
		}
		phase("uninstall, delete namespaces", t0)
		phase("total", start)
	})
	// On failure, show what the cluster saw.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, args := range [][]string{
			{"-n", ns, "get", "all,role,rolebinding,networkpolicy", "-o", "wide"},
			{"-n", ns, "describe", "pods"},
			{"-n", ns, "logs", "deploy/" + release, "-c", "cws", "--tail", "80"},
			{"-n", sessionsNS, "get", "pods,pvc,networkpolicy", "-o", "wide"},
			{"-n", sessionsNS, "describe", "pods"},
			{"get", "events", "-n", sessionsNS, "--sort-by", ".lastTimestamp"},
		} {
			o, err := k.run(ctx, kubectl, args...)
			t.Logf("kubectl %s:\n%s%v", strings.Join(args, " "), o, errOrEmpty(err))
		}
	})

	// Install: driver=kubernetes, one replica, the bundled Redis of cws-redis, a tenant
	// with a known HS256 secret, every image local (pullPolicy Never for the chart's).
	secret := randomHex(t, 24)
	values := fmt.Sprintf(`driver: kubernetes
replicaCount: 1
image:
  repository: cws
  tag: %[1]q
  pullPolicy: Never
workspace:
  defaultImage: %[2]q
kubernetes:
  namespace: %[3]q
  transport: direct
redis:
  enabled: %[5]v
  bundled: true
  image:
    repository: cws-redis
    tag: %[1]q
    pullPolicy: Never
  persistence:
    enabled: false
logFormat: text
podDisruptionBudget:
  enabled: false
tenants:
  list:
    - id: acme
      issuer: acme-platform
      audience: cws
      keys:
        - {kid: k1, alg: HS256, secret: %[4]q}
      policy: acme
`, version.Version, version.WorkspaceImage, sessionsNS, secret, bundledRedis)
	valuesFile := filepath.Join(t.TempDir(), "values.yaml")
	writeFile(t, valuesFile, []byte(values))
	t0 = time.Now()
	kc("create", "namespace", ns)
	if _, err := hk.run(t.Context(), helmBin, "install", release, ".", "-n", ns, "-f", valuesFile,
		"--wait", "--timeout", "5m"); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	phase("helm install --wait", t0)

	// What the chart granted, asked of the API server as cws's ServiceAccount: the
	// driver's verbs in the sessions' namespace, nothing elsewhere, no secrets.
	sa := "system:serviceaccount:" + ns + ":" + release
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "pods", "-n", sessionsNS}, "yes"},
		{[]string{"watch", "pods", "-n", sessionsNS}, "yes"},
		{[]string{"create", "pods/exec", "-n", sessionsNS}, "yes"},
		{[]string{"create", "persistentvolumeclaims", "-n", sessionsNS}, "yes"},
		{[]string{"create", "networkpolicies.networking.k8s.io", "-n", sessionsNS}, "yes"},
		{[]string{"get", "secrets", "-n", sessionsNS}, "no"},
		{[]string{"update", "pods", "-n", sessionsNS}, "no"},
		{[]string{"delete", "networkpolicies.networking.k8s.io", "-n", sessionsNS}, "no"},
		{[]string{"create", "pods", "-n", ns}, "no"},
		{[]string{"get", "secrets", "-n", ns}, "no"},
		{[]string{"list", "pods", "--all-namespaces"}, "no"},
		{[]string{"create", "namespaces"}, "no"},
	} {
		got, _ := k.run(t.Context(), kubectl, append([]string{"auth", "can-i", "--as", sa}, c.args...)...)
		if strings.TrimSpace(got) != c.want {
			t.Errorf("kubectl auth can-i --as %s %v = %q, want %s", sa, c.args, strings.TrimSpace(got), c.want)
		}
	}
	// The sessions' namespace enforces the restricted Pod Security Standard, and the
	// driver made its egress policy there (it may: networkpolicies create).
	if got := kc("get", "namespace", sessionsNS, "-o", "jsonpath={.metadata.labels.pod-security\\.kubernetes\\.io/enforce}"); got != "restricted" {
		t.Errorf("namespace %s: pod-security enforce label = %q, want restricted", sessionsNS, got)
	}
	if _, err := k.run(t.Context(), kubectl, "-n", sessionsNS, "get", "networkpolicy", "cws-deny-egress-"+release); err != nil {
		t.Errorf("the driver's egress policy: %v", err)
	}

	// Reach cws on its pod's IP (the cluster's pod network is this host's bridge),
	// else through kubectl port-forward.
	podIP := strings.TrimSpace(kc("-n", ns, "get", "pods", "-l",
		"app.kubernetes.io/instance="+release+",app.kubernetes.io/component=server",
		"-o", "jsonpath={.items[0].status.podIP}"))
	base := "http://" + net.JoinHostPort(podIP, "9960")
	client := &http.Client{Timeout: 3 * time.Minute}
	if resp, err := client.Get(base + "/readyz"); err == nil && resp.StatusCode == http.StatusOK {
		resp.Body.Close()
	} else {
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("status %s", resp.Status)
		}
		t.Logf("cws's pod IP %s: %v; using kubectl port-forward", podIP, err)
		base = portForward(t, kubectl, kubeconfig, ns, "deploy/"+release)
	}

	// A token of the tenant, signed with the secret given in the values.
	tenantsFile := filepath.Join(t.TempDir(), "tenants.yaml")
	writeFile(t, tenantsFile, fmt.Appendf(nil, `tenants:
  - id: acme
    issuer: acme-platform
    audience: cws
    keys:
      - {kid: k1, alg: HS256, secret: %q}
`, secret))
	tenants, err := auth.LoadTenants(tenantsFile)
	if err != nil {
		t.Fatal(err)
	}
	token, err := tenants.Get("acme").Mint("helm-kube-test", time.Hour, "", nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path string, body any, want int) []byte {
		t.Helper()
		var payload []byte
		if body != nil {
			payload, _ = json.Marshal(body)
		}
		t0 := time.Now()
		var resp *http.Response
		var b []byte
		// A 503 says "retry shortly" (a store call over --store-timeout on a loaded
		// machine): a client does, a few times, as this one.
		for attempt := 1; ; attempt++ {
			req, _ := http.NewRequestWithContext(t.Context(), method, base+path, bytes.NewReader(payload))
			req.Header.Set("Authorization", "Bearer "+token)
			if body != nil {
				req.Header.Set("Content-Type", "application/json")
			}
			var err error
			resp, err = client.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			b, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || want == http.StatusServiceUnavailable || attempt == 4 {
				break
			}
			t.Logf("%s %s = %s (attempt %d), retrying: %s", method, path, resp.Status, attempt, b)
			time.Sleep(time.Duration(attempt) * time.Second)
		}
		if resp.StatusCode != want {
			t.Fatalf("%s %s = %s, want %d: %s", method, path, resp.Status, want, b)
		}
		label := path
		if i := strings.LastIndex(path, "/tools/"); i >= 0 {
			label = path[i+1:]
		}
		phase(method+" "+label, t0)
		return b
	}

	// A session: its pod, created by cws through the API, in the sessions' namespace.
	var sess struct{ ID, State string }
	mustJSON(t, call("POST", "/v1/sessions", map[string]any{}, http.StatusCreated), &sess)
	if sess.ID == "" {
		t.Fatal("POST /v1/sessions returned no id")
	}
	podName := "cws-" + sess.ID
	checkSessionPod(t, kc("-n", sessionsNS, "get", "pod", podName, "-o", "json"), release)

	// Tool calls through the pod's agent.
	const content = "hello from a pod\n"
	var wr struct {
		Result  struct{ Size int }
		IsError bool
	}
	mustJSON(t, call("POST", "/v1/sessions/"+sess.ID+"/tools/writeFile",
		map[string]any{"path": "hello.txt", "contents": content}, http.StatusOK), &wr)
	if wr.IsError || wr.Result.Size != len(content) {
		t.Errorf("writeFile = %+v, want %d bytes written", wr, len(content))
	}
	var rd struct {
		Result  struct{ Content string }
		IsError bool
	}
	mustJSON(t, call("POST", "/v1/sessions/"+sess.ID+"/tools/readFile",
		map[string]any{"path": "hello.txt"}, http.StatusOK), &rd)
	if rd.IsError || rd.Result.Content != content {
		t.Errorf("readFile = %+v, want %q", rd, content)
	}
	run := string(call("POST", "/v1/sessions/"+sess.ID+"/tools/runCommand",
		map[string]any{"command": "echo", "args": []string{"ran", "in", "k8s"}}, http.StatusOK))
	if !strings.Contains(run, "ran in k8s") || strings.Contains(run, `"isError":true`) {
		t.Errorf("runCommand echo = %s", run)
	}
	// The file is in the pod's /workspace, the tool uid's.
	if got := kc("-n", sessionsNS, "exec", podName, "-c", "workspace", "--", "stat", "-c", "%u:%g %s", "/workspace/hello.txt"); strings.TrimSpace(got) != fmt.Sprintf("1000:1000 %d", len(content)) {
		t.Errorf("in the pod, /workspace/hello.txt is %q, want 1000:1000 %d", strings.TrimSpace(got), len(content))
	}

	// Deleting the session deletes its pod.
	call("DELETE", "/v1/sessions/"+sess.ID, nil, http.StatusNoContent)
	t0 = time.Now()
	if _, err := k.run(t.Context(), kubectl, "-n", sessionsNS, "wait", "--for=delete", "pod/"+podName, "--timeout=60s"); err != nil {
		t.Errorf("session pod %s outlived DELETE: %v", podName, err)
	}
	phase("session pod gone", t0)
}

// checkSessionPod checks a session's pod spec: the hardening sandbox/kube promises.
func checkSessionPod(t *testing.T, js, instance string) {
	t.Helper()
	type secCtx struct {
		RunAsNonRoot             *bool  `json:"runAsNonRoot"`
		RunAsUser                *int64 `json:"runAsUser"`
		ReadOnlyRootFilesystem   *bool  `json:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool  `json:"allowPrivilegeEscalation"`
		Privileged               *bool  `json:"privileged"`
		Capabilities             *struct {
			Add  []string `json:"add"`
			Drop []string `json:"drop"`
		} `json:"capabilities"`
		SeccompProfile *struct {
			Type string `json:"type"`
		} `json:"seccompProfile"`
	}
	type ctr struct {
		Name            string  `json:"name"`
		SecurityContext *secCtx `json:"securityContext"`
	}
	var p struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			AutomountServiceAccountToken *bool  `json:"automountServiceAccountToken"`
			SecurityContext              secCtx `json:"securityContext"`
			Containers                   []ctr  `json:"containers"`
			InitContainers               []ctr  `json:"initContainers"`
			Volumes                      []struct {
				Name     string          `json:"name"`
				HostPath json.RawMessage `json:"hostPath"`
			} `json:"volumes"`
		} `json:"spec"`
		Status struct {
			Phase string `json:"phase"`
			PodIP string `json:"podIP"`
		} `json:"status"`
	}
	mustJSON(t, json.RawMessage(js), &p)
	var raw map[string]any
	mustJSON(t, json.RawMessage(js), &raw)
	spec, _ := raw["spec"].(map[string]any)
	for _, k := range []string{"hostNetwork", "hostPID", "hostIPC"} {
		if spec[k] == true {
			t.Errorf("session pod: %s", k)
		}
	}
	if p.Metadata.Labels["cws.managed"] != "true" || p.Metadata.Labels["cws.instance"] != instance {
		t.Errorf("session pod labels %v: want cws.managed=true, cws.instance=%s", p.Metadata.Labels, instance)
	}
	if p.Status.Phase != "Running" {
		t.Errorf("session pod phase %s, want Running", p.Status.Phase)
	}
	if a := p.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Error("session pod: automountServiceAccountToken is not false")
	}
	if sc := p.Spec.SecurityContext; sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("session pod securityContext %+v: want runAsNonRoot and a non-zero runAsUser", sc)
	}
	for _, v := range p.Spec.Volumes {
		if len(v.HostPath) > 0 {
			t.Errorf("session pod volume %s is a hostPath", v.Name)
		}
	}
	all := append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...)
	if len(p.Spec.Containers) == 0 {
		t.Fatal("session pod has no containers")
	}
	for _, c := range all {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("session pod container %s: no securityContext", c.Name)
		case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
			t.Errorf("session pod container %s: runAsNonRoot is not true", c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("session pod container %s: readOnlyRootFilesystem is not true", c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("session pod container %s: allowPrivilegeEscalation is not false", c.Name)
		case sc.Privileged != nil && *sc.Privileged:
			t.Errorf("session pod container %s: privileged", c.Name)
		case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) || len(sc.Capabilities.Add) > 0:
			t.Errorf("session pod container %s: capabilities %+v, want drop [ALL] and nothing added", c.Name, sc.Capabilities)
		case sc.SeccompProfile == nil && p.Spec.SecurityContext.SeccompProfile == nil:
			t.Errorf("session pod container %s: no seccomp profile", c.Name)
		}
	}
}

// portForward runs kubectl port-forward to target's port 9960 until the test ends and
// returns the local base URL.
func portForward(t *testing.T, kubectl, kubeconfig, ns, target string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, kubectl, "-n", ns, "port-forward", target, fmt.Sprintf("%d:9960", port))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			return base
		}
	}
	t.Fatalf("kubectl port-forward %s: cws did not answer: %s", target, stderr.String())
	return ""
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
