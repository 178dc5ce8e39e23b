package deploy_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/workspace/policy"
)

// kubeVersion is what `helm template` renders for: a helm built with `go install`
// lacks the link-time default and would claim v1.20, below the chart's kubeVersion.
const kubeVersion = "1.31.0"

// optionSet is one documented values file of the chart and what it must render.
type optionSet struct {
	file           string // under helm/cws, "" for the defaults
	dind           bool   // a DinD sidecar instead of the node's socket
	bundledRedis   bool   // a Redis StatefulSet in the release
	serviceMonitor bool
	ingress        bool
}

var optionSets = []optionSet{
	{file: "", bundledRedis: true},
	{file: "ci/default-values.yaml", bundledRedis: true},
	{file: "ci/dind-values.yaml", dind: true, bundledRedis: true},
	{file: "ci/external-redis-values.yaml"},
	{file: "ci/ingress-servicemonitor-values.yaml", bundledRedis: true, serviceMonitor: true, ingress: true},
}

// helm returns a command runner for scripts/helm.sh, building helm if needed; it skips
// the test locally (fails it in CI) when helm can be neither found nor built.
func helm(t *testing.T) (command, string) {
	t.Helper()
	root := repoRoot(t)
	c := command{dir: filepath.Join(root, "helm", "cws"), timeout: 10 * time.Minute}
	script := filepath.Join(root, "scripts", "helm.sh")
	_, err := c.run(t.Context(), script, "version", "--short")
	testenv.RequireCI(t, "helm (scripts/helm.sh)", err)
	c.timeout = 2 * time.Minute
	return c, script
}

func TestHelm(t *testing.T) {
	c, h := helm(t)
	// Every values file under ci/ must be in optionSets, so none goes unchecked.
	files, _ := filepath.Glob(filepath.Join(c.dir, "ci", "*.yaml"))
	for _, f := range files {
		rel := "ci/" + filepath.Base(f)
		if !slices.ContainsFunc(optionSets, func(o optionSet) bool { return o.file == rel }) {
			t.Errorf("%s is not in optionSets", rel)
		}
	}
	for _, o := range optionSets {
		name := strings.TrimSuffix(filepath.Base(o.file), ".yaml")
		if o.file == "" {
			name = "defaults"
		}
		t.Run(name, func(t *testing.T) {
			args := []string{}
			if o.file != "" {
				args = append(args, "-f", o.file)
			}
			c.must(t, h, append([]string{"lint", "--strict", "."}, args...)...)
			out := c.must(t, h, append([]string{"template", "rel", ".", "--namespace", "cws-test",
				"--kube-version", kubeVersion}, args...)...)
			checkRender(t, o, parseManifests(t, out))
		})
	}
}

// TestHelmRejects checks that values the chart cannot honour fail at render time.
func TestHelmRejects(t *testing.T) {
	c, h := helm(t)
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"writable root filesystem", []string{"--set", "securityContext.readOnlyRootFilesystem=false"}, "readOnlyRootFilesystem"},
		{"root user", []string{"--set", "securityContext.runAsNonRoot=false"}, "runAsNonRoot"},
		{"no redis", []string{"--set", "redis.bundled=false"}, "redis.external"},
		{"unknown docker mode", []string{"--set", "docker.mode=podman"}, "/docker/mode"},
		{"remote without host", []string{"--set", "docker.mode=remote"}, "docker.remote.host"},
		{"unknown policy field", []string{"--set", "policies.acme.allowedCommandz[0]=ls"}, "allowedCommandz"},
		{"missing policy", []string{"--set-json", `tenants.list=[{"id":"acme","issuer":"i","keys":[{"kid":"k1","alg":"HS256"}],"policy":"nope"}]`}, `policy "nope"`},
		{"short secret", []string{"--set-json", `tenants.list=[{"id":"acme","issuer":"i","keys":[{"kid":"k1","alg":"HS256","secret":"short"}]}]`}, "/secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"template", "rel", ".", "--kube-version", kubeVersion}, tc.set...)
			_, err := c.run(t.Context(), h, args...)
			if err == nil {
				t.Fatalf("helm template %v succeeded, want an error", tc.set)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not mention %q: %v", tc.want, err)
			}
		})
	}
}

// manifest is the part of a Kubernetes object the checks read.
type manifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec json.RawMessage   `json:"spec"`
	Data map[string]string `json:"data"`
}

type podSpec struct {
	SecurityContext struct {
		RunAsNonRoot       *bool   `json:"runAsNonRoot"`
		SupplementalGroups []int64 `json:"supplementalGroups"`
	} `json:"securityContext"`
	Containers     []container `json:"containers"`
	InitContainers []container `json:"initContainers"`
	Volumes        []podVolume `json:"volumes"`
}

type podVolume struct {
	Name     string `json:"name"`
	HostPath *struct {
		Path string `json:"path"`
	} `json:"hostPath"`
	Projected *struct {
		Sources []struct {
			Secret    *struct{ Name string } `json:"secret"`
			ConfigMap *struct{ Name string } `json:"configMap"`
		} `json:"sources"`
	} `json:"projected"`
}

type container struct {
	Name  string `json:"name"`
	Image string `json:"image"`
	Env   []struct {
		Name      string          `json:"name"`
		Value     string          `json:"value"`
		ValueFrom json.RawMessage `json:"valueFrom"`
	} `json:"env"`
	Ports []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
	} `json:"ports"`
	LivenessProbe   *probe `json:"livenessProbe"`
	ReadinessProbe  *probe `json:"readinessProbe"`
	SecurityContext *struct {
		RunAsNonRoot           *bool `json:"runAsNonRoot"`
		ReadOnlyRootFilesystem *bool `json:"readOnlyRootFilesystem"`
		Privileged             *bool `json:"privileged"`
	} `json:"securityContext"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
	} `json:"volumeMounts"`
}

type probe struct {
	HTTPGet *struct {
		Path string `json:"path"`
		Port any    `json:"port"`
	} `json:"httpGet"`
}

// parseManifests splits helm's output into objects. Each document is converted with
// YAMLToJSONStrict, so a duplicate key (which Kubernetes would silently resolve) fails.
func parseManifests(t *testing.T, out string) []manifest {
	t.Helper()
	var list []manifest
	for _, doc := range strings.Split(out, "\n---") {
		if strings.TrimSpace(strings.TrimPrefix(doc, "---")) == "" {
			continue
		}
		js, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, doc)
		}
		if string(js) == "null" {
			continue // a document of comments only
		}
		var m manifest
		if err := json.Unmarshal(js, &m); err != nil {
			t.Fatalf("rendered object: %v\n%s", err, doc)
		}
		if m.Kind == "" || m.APIVersion == "" || m.Metadata.Name == "" {
			t.Fatalf("object without kind, apiVersion or name:\n%s", doc)
		}
		list = append(list, m)
	}
	return list
}

func byKind(list []manifest, kind string) []manifest {
	var out []manifest
	for _, m := range list {
		if m.Kind == kind {
			out = append(out, m)
		}
	}
	return out
}

func checkRender(t *testing.T, o optionSet, list []manifest) {
	seen := map[string]bool{}
	for _, m := range list {
		key := m.Kind + "/" + m.Metadata.Name
		if seen[key] {
			t.Errorf("%s rendered twice", key)
		}
		seen[key] = true
	}

	deps := byKind(list, "Deployment")
	if len(deps) != 1 {
		t.Fatalf("%d Deployments, want 1", len(deps))
	}
	var dep struct {
		Replicas *int `json:"replicas"`
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Spec podSpec `json:"spec"`
		} `json:"template"`
	}
	mustJSON(t, deps[0].Spec, &dep)
	if dep.Replicas == nil || *dep.Replicas < 2 {
		t.Errorf("Deployment replicas = %v, want >= 2 (sessions are in Redis, MCP is stateless)", dep.Replicas)
	}
	pod := dep.Template.Spec
	podLabels := dep.Template.Metadata.Labels
	if !subset(dep.Selector.MatchLabels, podLabels) {
		t.Errorf("Deployment selector %v does not match its pod labels %v", dep.Selector.MatchLabels, podLabels)
	}
	if pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Error("pod securityContext.runAsNonRoot is not true")
	}

	cws := findContainer(pod.Containers, "cws")
	if cws == nil {
		t.Fatalf("no container cws in %v", pod.Containers)
	}
	checkProbe(t, "liveness", cws.LivenessProbe, "/healthz")
	checkProbe(t, "readiness", cws.ReadinessProbe, "/readyz")
	if sc := cws.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("cws securityContext %+v: want runAsNonRoot and readOnlyRootFilesystem true", sc)
	} else if sc.Privileged != nil && *sc.Privileged {
		t.Error("cws container is privileged")
	}
	if !hasMount(cws, "/tmp") {
		t.Error("cws has a read-only root filesystem but no writable /tmp")
	}
	env := map[string]bool{}
	for _, e := range cws.Env {
		env[e.Name] = e.Value != "" || len(e.ValueFrom) > 0
	}
	for _, name := range []string{"CWS_ADDR", "CWS_TENANTS", "CWS_REDIS_URL", "CWS_DEFAULT_IMAGE", "CWS_PUBLIC_URL"} {
		if !env[name] {
			t.Errorf("cws container has no %s", name)
		}
	}

	// The Docker engine: a DinD sidecar, or the node's socket, never both.
	dind := findContainer(pod.Containers, "dind")
	if o.dind != (dind != nil) {
		t.Errorf("DinD sidecar present = %v, want %v", dind != nil, o.dind)
	}
	socket := false
	for _, v := range pod.Volumes {
		if v.HostPath != nil && strings.HasSuffix(v.HostPath.Path, "docker.sock") {
			socket = true
		}
	}
	if socket == o.dind {
		t.Errorf("node docker.sock hostPath present = %v with dind = %v", socket, o.dind)
	}
	if o.dind {
		if !env["DOCKER_HOST"] {
			t.Error("dind: cws has no DOCKER_HOST")
		}
		if sc := dind.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
			t.Error("dind sidecar is not privileged; dockerd cannot run")
		}
	}
	// The agents' socket directory: at the same path in cws as where the engine finds
	// it (the node, or the DinD sidecar, whose dockerd resolves the bind mounts), and
	// handed to cws's uid by an init container.
	sockDir := ""
	for _, e := range cws.Env {
		if e.Name == "CWS_AGENT_SOCKET_DIR" {
			sockDir = e.Value
		}
	}
	if sockDir == "" {
		t.Error("cws has no CWS_AGENT_SOCKET_DIR: it would reach the agents through docker exec only")
	} else {
		if !hasMount(cws, sockDir) {
			t.Errorf("cws does not mount the socket directory at %s", sockDir)
		}
		if o.dind && !hasMount(dind, sockDir) {
			t.Errorf("the DinD sidecar does not mount the socket directory at %s", sockDir)
		}
		if init := findContainer(pod.InitContainers, "agent-socket-dir"); init == nil || !hasMount(init, sockDir) {
			t.Errorf("no init container agent-socket-dir mounting %s", sockDir)
		}
		if !o.dind && !slices.ContainsFunc(pod.Volumes, func(v podVolume) bool { return v.HostPath != nil && v.HostPath.Path == sockDir }) {
			t.Errorf("no hostPath volume at %s: the node's engine would not see the sockets", sockDir)
		}
	}
	if len(pod.SecurityContext.SupplementalGroups) == 0 {
		t.Error("no supplementalGroups: cws (non-root) cannot open the Docker socket")
	}

	// Service, PDB, ServiceMonitor, Ingress.
	svcs := byKind(list, "Service")
	var cwsSvc *manifest
	for i, s := range svcs {
		var spec struct {
			Selector map[string]string `json:"selector"`
		}
		mustJSON(t, s.Spec, &spec)
		if subset(spec.Selector, podLabels) {
			cwsSvc = &svcs[i]
		}
	}
	if cwsSvc == nil {
		t.Error("no Service selects the cws pods")
	}
	pdbs := byKind(list, "PodDisruptionBudget")
	if len(pdbs) != 1 {
		t.Errorf("%d PodDisruptionBudgets, want 1", len(pdbs))
	} else {
		var spec struct {
			MinAvailable   any `json:"minAvailable"`
			MaxUnavailable any `json:"maxUnavailable"`
			Selector       struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
		}
		mustJSON(t, pdbs[0].Spec, &spec)
		if !subset(spec.Selector.MatchLabels, podLabels) {
			t.Errorf("PDB selector %v does not match the cws pods %v", spec.Selector.MatchLabels, podLabels)
		}
		if spec.MinAvailable == nil && spec.MaxUnavailable == nil {
			t.Error("PDB has neither minAvailable nor maxUnavailable")
		}
	}
	if n := len(byKind(list, "ServiceMonitor")); (n == 1) != o.serviceMonitor || n > 1 {
		t.Errorf("%d ServiceMonitors, want one only when enabled (%v)", n, o.serviceMonitor)
	}
	if n := len(byKind(list, "Ingress")); (n == 1) != o.ingress || n > 1 {
		t.Errorf("%d Ingresses, want one only when enabled (%v)", n, o.ingress)
	}
	if n := len(byKind(list, "ServiceAccount")); n != 1 {
		t.Errorf("%d ServiceAccounts, want 1", n)
	}

	// Redis: the bundled StatefulSet, or an external URL.
	sts := byKind(list, "StatefulSet")
	if o.bundledRedis != (len(sts) == 1) || len(sts) > 1 {
		t.Errorf("%d StatefulSets, want a Redis one only when bundled (%v)", len(sts), o.bundledRedis)
	}
	for _, s := range sts {
		var spec struct {
			Template struct {
				Spec podSpec `json:"spec"`
			} `json:"template"`
		}
		mustJSON(t, s.Spec, &spec)
		r := findContainer(spec.Template.Spec.Containers, "redis")
		if r == nil || !strings.Contains(strings.Join(redisArgs(t, s.Spec), " "), "--appendonly yes") {
			t.Errorf("StatefulSet %s: no redis container with --appendonly yes", s.Metadata.Name)
		}
	}

	checkTenantsVolume(t, list, pod)
}

// checkTenantsVolume rebuilds /etc/cws from the rendered Secret and ConfigMap, as the
// projected volume would, and loads it the way cws serve does.
func checkTenantsVolume(t *testing.T, list []manifest, pod podSpec) {
	dir := t.TempDir()
	found := false
	for _, v := range pod.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			for _, m := range list {
				switch {
				case src.Secret != nil && m.Kind == "Secret" && m.Metadata.Name == src.Secret.Name:
					for k, b64 := range m.Data {
						b, err := base64.StdEncoding.DecodeString(b64)
						if err != nil {
							t.Fatalf("Secret %s key %s: %v", m.Metadata.Name, k, err)
						}
						writeFile(t, filepath.Join(dir, k), b)
					}
					found = true
				case src.ConfigMap != nil && m.Kind == "ConfigMap" && m.Metadata.Name == src.ConfigMap.Name:
					for k, s := range m.Data {
						writeFile(t, filepath.Join(dir, k), []byte(s))
					}
				}
			}
		}
	}
	if !found {
		t.Fatal("no projected volume with the tenants Secret")
	}
	tenants, err := auth.LoadTenants(filepath.Join(dir, "tenants.yaml"))
	if err != nil {
		t.Fatalf("cws would refuse the rendered tenants file: %v", err)
	}
	_ = tenants
	policies, _ := filepath.Glob(filepath.Join(dir, "*.cws-policy.json"))
	if len(policies) == 0 {
		t.Error("no policy rendered")
	}
	for _, p := range policies {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := policy.Parse(b); err != nil {
			t.Errorf("cws would refuse the rendered policy %s: %v", filepath.Base(p), err)
		}
	}
}

func redisArgs(t *testing.T, spec json.RawMessage) []string {
	var s struct {
		Template struct {
			Spec struct {
				Containers []struct {
					Command []string `json:"command"`
					Args    []string `json:"args"`
				} `json:"containers"`
			} `json:"spec"`
		} `json:"template"`
	}
	mustJSON(t, spec, &s)
	var out []string
	for _, c := range s.Template.Spec.Containers {
		out = append(out, c.Command...)
		out = append(out, c.Args...)
	}
	return out
}

func checkProbe(t *testing.T, what string, p *probe, path string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path {
		t.Errorf("cws %s probe = %+v, want httpGet %s", what, p, path)
	}
}

func findContainer(list []container, name string) *container {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

func hasMount(c *container, path string) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return true
		}
	}
	return false
}

// subset reports whether every label of sel is in labels (and sel is not empty).
func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func mustJSON(t *testing.T, raw json.RawMessage, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
