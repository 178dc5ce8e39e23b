package deploy_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
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
	file           string   // under helm/cws, "" for the defaults
	name           string   // the subtest's name; default: the file's
	set            []string // more helm arguments (--set ...)
	dind           bool     // a DinD sidecar instead of the node's socket
	bundledRedis   bool     // a Redis StatefulSet in the release
	noRedis        bool     // redis.enabled=false: the embedded store, one replica
	serviceMonitor bool
	ingress        bool
	// kube: driver=kubernetes, with its sessions in namespace sessionsNS (which the
	// chart creates unless noNamespace): no Docker at all, a Role and RoleBinding there.
	kube        bool
	sessionsNS  string
	noNamespace bool
	// existingSA: serviceAccount.create=false, the pods run as serviceAccount.name.
	existingSA string
}

var optionSets = []optionSet{
	{file: "", bundledRedis: true},
	{file: "ci/default-values.yaml", bundledRedis: true},
	{file: "ci/dind-values.yaml", dind: true, bundledRedis: true},
	{file: "ci/external-redis-values.yaml"},
	{file: "ci/ingress-servicemonitor-values.yaml", bundledRedis: true, serviceMonitor: true, ingress: true},
	{file: "ci/kubernetes-values.yaml", kube: true, sessionsNS: "cws-sessions", bundledRedis: true},
	// The Kubernetes driver's defaults (namespace <release>-sessions), and with an
	// existing namespace, an existing ServiceAccount and no bundled Redis.
	{name: "kubernetes-defaults", set: []string{"--set", "driver=kubernetes"},
		kube: true, sessionsNS: "rel-sessions", bundledRedis: true},
	{name: "kubernetes-existing", file: "ci/external-redis-values.yaml", set: []string{"--set", "driver=kubernetes",
		"--set", "kubernetes.namespace=sandboxes", "--set", "kubernetes.createNamespace=false",
		"--set", "serviceAccount.create=false", "--set", "serviceAccount.name=cws-sa"},
		kube: true, sessionsNS: "sandboxes", noNamespace: true, existingSA: "cws-sa"},
	// No Redis: one replica with the embedded store (TestHelmKube's, on a cluster
	// without DNS).
	{name: "kubernetes-embedded-store", set: []string{"--set", "driver=kubernetes", "--set", "redis.enabled=false",
		"--set", "replicaCount=1"}, kube: true, sessionsNS: "rel-sessions", noRedis: true},
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
		switch {
		case o.name != "":
			name = o.name
		case o.file == "":
			name = "defaults"
		}
		t.Run(name, func(t *testing.T) {
			args := []string{}
			if o.file != "" {
				args = append(args, "-f", o.file)
			}
			args = append(args, o.set...)
			c.must(t, h, append([]string{"lint", "--strict", "."}, args...)...)
			out := c.must(t, h, append([]string{"template", "rel", ".", "--namespace", releaseNS,
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
		{"embedded store with replicas", []string{"--set", "redis.enabled=false"}, "replicaCount: 1"},
		{"unknown docker mode", []string{"--set", "docker.mode=podman"}, "/docker/mode"},
		{"unknown driver", []string{"--set", "driver=podman"}, "/driver"},
		{"no preview connections", []string{"--set", "network.previewMaxConns=0"}, "previewMaxConns"},
		{"bad sessions namespace", []string{"--set", "driver=kubernetes", "--set", "kubernetes.namespace=Sessions_1"}, "/kubernetes/namespace"},
		{"sessions in the release namespace", []string{"--set", "driver=kubernetes", "--set", "kubernetes.namespace=default"}, "release's own namespace"},
		{"unknown kube transport", []string{"--set", "driver=kubernetes", "--set", "kubernetes.transport=ssh"}, "/kubernetes/transport"},
		{"unknown kube value", []string{"--set", "driver=kubernetes", "--set", "kubernetes.namespaces=x"}, "namespaces"},
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
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec json.RawMessage   `json:"spec"`
	Data map[string]string `json:"data"`
	Raw  json.RawMessage   `json:"-"` // the whole object
}

type podSpec struct {
	ServiceAccountName           string `json:"serviceAccountName"`
	AutomountServiceAccountToken *bool  `json:"automountServiceAccountToken"`
	SecurityContext              struct {
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
		m.Raw = js
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
	if o.noRedis && (dep.Replicas == nil || *dep.Replicas != 1) {
		t.Errorf("Deployment replicas = %v, want 1 (the embedded store is one pod's memory)", dep.Replicas)
	} else if !o.noRedis && (dep.Replicas == nil || *dep.Replicas < 2) {
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
		if name == "CWS_REDIS_URL" && o.noRedis {
			if _, ok := env[name]; ok {
				t.Errorf("redis.enabled=false, but cws has %s", name)
			}
			continue
		}
		if !env[name] {
			t.Errorf("cws container has no %s", name)
		}
	}

	// Nothing cluster-wide, whatever the driver.
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding"} {
		if n := len(byKind(list, kind)); n > 0 {
			t.Errorf("%d %s objects rendered: cws needs nothing cluster-wide", n, kind)
		}
	}
	if o.kube {
		checkKube(t, o, list, pod, podLabels, cws)
	} else {
		checkDocker(t, o, list, pod, cws, env)
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
	if n := len(byKind(list, "ServiceAccount")); n != 1 && o.existingSA == "" {
		t.Errorf("%d ServiceAccounts, want 1", n)
	} else if o.existingSA != "" && (n != 0 || pod.ServiceAccountName != o.existingSA) {
		t.Errorf("%d ServiceAccounts and pods running as %q, want none and %q", n, pod.ServiceAccountName, o.existingSA)
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

// checkDocker checks the Docker driver's engine access: a DinD sidecar or the node's
// socket (never both), the agents' socket directory, and nothing of the Kubernetes
// driver (no API token, no Role, no sessions' namespace).
func checkDocker(t *testing.T, o optionSet, list []manifest, pod podSpec, cws *container, env map[string]bool) {
	t.Helper()
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
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("driver=docker: the cws pods mount a service account token; cws calls no Kubernetes API")
	}
	for _, kind := range []string{"Namespace", "Role", "RoleBinding", "NetworkPolicy"} {
		if n := len(byKind(list, kind)); n > 0 {
			t.Errorf("driver=docker renders %d %s objects, want none", n, kind)
		}
	}
	for _, e := range cws.Env {
		if strings.HasPrefix(e.Name, "CWS_KUBE_") || (e.Name == "CWS_DRIVER" && e.Value != "docker") {
			t.Errorf("driver=docker: cws has %s=%q", e.Name, e.Value)
		}
	}
}

// releaseNS is the namespace TestHelm renders the release into.
const releaseNS = "cws-test"

// kubeRules are the only API calls the Kubernetes driver (sandbox/kube) makes, all in
// the sessions' namespace, as group/resource/verb: the Role must grant exactly these.
var kubeRules = []string{
	"/pods/create", "/pods/delete", "/pods/get", "/pods/list", "/pods/patch", "/pods/watch",
	"/pods/exec/create", "/pods/exec/get", // SPDY POSTs, WebSocket GETs
	"/persistentvolumeclaims/create", "/persistentvolumeclaims/delete",
	"/persistentvolumeclaims/get", "/persistentvolumeclaims/list",
	"networking.k8s.io/networkpolicies/create", "networking.k8s.io/networkpolicies/get",
}

// checkKube checks driver=kubernetes: no Docker anywhere (no socket, no sidecar, no
// hostPath, nothing privileged), the driver's env, the API token, and RBAC confined to
// the sessions' namespace: exactly the driver's verbs, bound to cws's ServiceAccount.
func checkKube(t *testing.T, o optionSet, list []manifest, pod podSpec, podLabels map[string]string, cws *container) {
	t.Helper()
	for _, m := range list {
		noDocker(t, m.Kind+"/"+m.Metadata.Name, m.Raw)
	}
	if len(pod.Containers) != 1 {
		t.Errorf("cws pod has containers %v, want cws alone", containerNames(pod.Containers))
	}
	if len(pod.InitContainers) != 0 {
		t.Errorf("cws pod has init containers %v, want none", containerNames(pod.InitContainers))
	}
	if len(pod.SecurityContext.SupplementalGroups) != 0 {
		t.Errorf("cws pod has supplementalGroups %v: there is no Docker socket to open", pod.SecurityContext.SupplementalGroups)
	}
	if pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Error("driver=kubernetes: the cws pods do not mount their service account token; the driver calls the API with it")
	}
	env := map[string]string{}
	for _, e := range cws.Env {
		env[e.Name] = e.Value
	}
	want := map[string]string{
		"CWS_DRIVER":           "kubernetes",
		"CWS_KUBE_NAMESPACE":   o.sessionsNS,
		"CWS_KUBE_AGENT_IMAGE": cws.Image,
		"CWS_KUBE_TRANSPORT":   "direct",
		"CWS_INSTANCE":         "rel",
	}
	for k, v := range want {
		if got, ok := env[k]; !ok || got != v {
			t.Errorf("cws env %s = %q (set: %v), want %q", k, got, ok, v)
		}
	}
	for _, k := range []string{"CWS_AGENT_SOCKET_DIR", "CWS_AGENT_TRANSPORT", "KUBECONFIG"} {
		if _, ok := env[k]; ok {
			t.Errorf("driver=kubernetes: cws has %s (Docker's agent sockets, or a kubeconfig instead of the in-cluster config)", k)
		}
	}

	// The sessions' namespace: shipped (with the restricted Pod Security Standard)
	// unless it is the operator's, and holding only the RBAC and the agent policy.
	nss := byKind(list, "Namespace")
	switch {
	case o.noNamespace && len(nss) != 0:
		t.Errorf("kubernetes.createNamespace=false renders %d Namespaces", len(nss))
	case !o.noNamespace && (len(nss) != 1 || nss[0].Metadata.Name != o.sessionsNS):
		t.Errorf("Namespaces %v, want %s alone", names(nss), o.sessionsNS)
	case !o.noNamespace && nss[0].Metadata.Labels["pod-security.kubernetes.io/enforce"] != "restricted":
		t.Errorf("Namespace %s labels %v: want pod-security.kubernetes.io/enforce=restricted", o.sessionsNS, nss[0].Metadata.Labels)
	}
	for _, m := range list {
		if m.Metadata.Namespace == "" {
			continue
		}
		if m.Metadata.Namespace != o.sessionsNS || !slices.Contains([]string{"Role", "RoleBinding", "NetworkPolicy"}, m.Kind) {
			t.Errorf("%s/%s in namespace %s: only the Role, RoleBinding and NetworkPolicy go to the sessions' namespace %s",
				m.Kind, m.Metadata.Name, m.Metadata.Namespace, o.sessionsNS)
		}
	}

	roles := byKind(list, "Role")
	if len(roles) != 1 {
		t.Fatalf("%d Roles, want 1", len(roles))
	}
	role := roles[0]
	if role.Metadata.Namespace != o.sessionsNS {
		t.Errorf("Role %s is in namespace %q, want the sessions' %q", role.Metadata.Name, role.Metadata.Namespace, o.sessionsNS)
	}
	var r struct {
		Rules []struct {
			APIGroups       []string `json:"apiGroups"`
			Resources       []string `json:"resources"`
			Verbs           []string `json:"verbs"`
			ResourceNames   []string `json:"resourceNames"`
			NonResourceURLs []string `json:"nonResourceURLs"`
		} `json:"rules"`
	}
	mustJSON(t, role.Raw, &r)
	var got []string
	for _, rule := range r.Rules {
		if len(rule.NonResourceURLs) > 0 || len(rule.ResourceNames) > 0 {
			t.Errorf("Role rule %+v: want resources and verbs only", rule)
		}
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					got = append(got, g+"/"+res+"/"+v)
				}
			}
		}
	}
	slices.Sort(got)
	wantRules := slices.Sorted(slices.Values(kubeRules))
	if !slices.Equal(got, wantRules) {
		t.Errorf("Role grants\n  %v\nwant exactly\n  %v", got, wantRules)
	}

	// The RoleBinding: that Role, to the ServiceAccount the cws pods run as.
	rbs := byKind(list, "RoleBinding")
	if len(rbs) != 1 {
		t.Fatalf("%d RoleBindings, want 1", len(rbs))
	}
	var rb struct {
		RoleRef struct {
			APIGroup, Kind, Name string
		} `json:"roleRef"`
		Subjects []struct {
			Kind, Name, Namespace string
		} `json:"subjects"`
	}
	mustJSON(t, rbs[0].Raw, &rb)
	if rbs[0].Metadata.Namespace != o.sessionsNS {
		t.Errorf("RoleBinding in namespace %q, want %q", rbs[0].Metadata.Namespace, o.sessionsNS)
	}
	if rb.RoleRef.APIGroup != "rbac.authorization.k8s.io" || rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Metadata.Name {
		t.Errorf("RoleBinding roleRef %+v, want Role %s", rb.RoleRef, role.Metadata.Name)
	}
	if pod.ServiceAccountName == "" {
		t.Error("the cws pods name no serviceAccountName")
	}
	if len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" ||
		rb.Subjects[0].Name != pod.ServiceAccountName || rb.Subjects[0].Namespace != releaseNS {
		t.Errorf("RoleBinding subjects %+v, want the ServiceAccount %s/%s alone", rb.Subjects, releaseNS, pod.ServiceAccountName)
	}
	for _, sa := range byKind(list, "ServiceAccount") {
		if sa.Metadata.Name != pod.ServiceAccountName {
			t.Errorf("the chart's ServiceAccount is %s, but the cws pods run as %s", sa.Metadata.Name, pod.ServiceAccountName)
		}
	}

	// The agents' ingress policy: session pods of this release, reached by its cws
	// pods only, on the agent's port.
	nps := byKind(list, "NetworkPolicy")
	if len(nps) != 1 {
		t.Fatalf("%d NetworkPolicies, want the agents' ingress policy", len(nps))
	}
	var np struct {
		PodSelector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"podSelector"`
		PolicyTypes []string `json:"policyTypes"`
		Ingress     []struct {
			From []struct {
				NamespaceSelector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"namespaceSelector"`
				PodSelector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"podSelector"`
			} `json:"from"`
			Ports []struct {
				Protocol string `json:"protocol"`
				Port     int    `json:"port"`
			} `json:"ports"`
		} `json:"ingress"`
	}
	mustJSON(t, nps[0].Spec, &np)
	if !maps.Equal(np.PodSelector.MatchLabels, map[string]string{"cws.managed": "true", "cws.instance": "rel"}) ||
		!slices.Equal(np.PolicyTypes, []string{"Ingress"}) || len(np.Ingress) != 1 || len(np.Ingress[0].From) != 1 ||
		len(np.Ingress[0].Ports) != 1 || np.Ingress[0].Ports[0].Port != 7433 ||
		np.Ingress[0].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != releaseNS ||
		!subset(np.Ingress[0].From[0].PodSelector.MatchLabels, podLabels) {
		t.Errorf("NetworkPolicy %s = %+v: want ingress to this release's session pods from its cws pods only, on 7433", nps[0].Metadata.Name, np)
	}
}

// noDocker fails if an object has a hostPath, a privileged container, the Docker
// socket, a DinD sidecar or DOCKER_* env: driver=kubernetes needs none of them.
func noDocker(t *testing.T, what string, raw json.RawMessage) {
	t.Helper()
	var v any
	mustJSON(t, raw, &v)
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				p := path + "." + k
				switch {
				case k == "hostPath":
					t.Errorf("%s: %s: a hostPath", what, p)
				case k == "privileged" && c == true:
					t.Errorf("%s: %s: privileged", what, p)
				case k == "name" && (c == "dind" || strings.HasPrefix(fmt.Sprint(c), "DOCKER_")):
					t.Errorf("%s: %s = %v", what, p, c)
				}
				walk(p, c)
			}
		case []any:
			for i, c := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), c)
			}
		case string:
			if strings.Contains(v, "docker.sock") || strings.Contains(v, "/run/dind") {
				t.Errorf("%s: %s = %q: the Docker socket", what, path, v)
			}
		}
	}
	walk("", v)
}

func containerNames(list []container) []string {
	var out []string
	for _, c := range list {
		out = append(out, c.Name)
	}
	return out
}

func names(list []manifest) []string {
	var out []string
	for _, m := range list {
		out = append(out, m.Metadata.Name)
	}
	return out
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
