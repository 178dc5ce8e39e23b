package kube

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
)

func testDriver(cfg Config) *Driver {
	return &Driver{cfg: cfg, ns: "ns", instance: "i1", defaults: sandbox.WithDefaults(cfg.Defaults, packageDefaults), agentHash: "h"}
}

// TestPodHardening: the pod a session gets is the Docker container's hardening, field
// by field, for every container in it.
func TestPodHardening(t *testing.T) {
	d := testDriver(Config{AgentImage: "cws:1", RuntimeClass: "gvisor", UserNamespaces: true})
	p := d.pod("cws-s-1", "", sandbox.Spec{Session: "s-1", Tenant: "t", Image: "img:1", User: "1001:1002",
		Limits: sandbox.Limits{NanoCPUs: 500_000_000, MemoryBytes: 512 << 20, TmpSizeBytes: 64 << 20},
		Env:    map[string]string{"A": "1", agent.EnvSecret: "planted", "CWS_UID_GID": "0:0"}}, "sekrit")
	s := p.Spec
	if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken || s.EnableServiceLinks == nil || *s.EnableServiceLinks {
		t.Error("the pod gets a service account token or service links")
	}
	if s.HostUsers == nil || *s.HostUsers || s.RuntimeClassName == nil || *s.RuntimeClassName != "gvisor" {
		t.Error("hostUsers/runtimeClassName not as configured")
	}
	if s.HostNetwork || s.HostPID || s.HostIPC || s.RestartPolicy != corev1.RestartPolicyNever {
		t.Error("host namespaces or a restart policy")
	}
	ps := s.SecurityContext
	if ps == nil || !*ps.RunAsNonRoot || *ps.RunAsUser != 1001 || *ps.RunAsGroup != 1002 || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", ps)
	}
	for _, c := range append(append([]corev1.Container(nil), s.InitContainers...), s.Containers...) {
		sc := c.SecurityContext
		if sc == nil || !*sc.RunAsNonRoot || *sc.RunAsUser != 1001 || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem ||
			*sc.Privileged || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 ||
			sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("container %s: security context %+v", c.Name, sc)
		}
		lim, req := c.Resources.Limits, c.Resources.Requests
		if lim.Cpu().MilliValue() != 500 || lim.Memory().Value() != 512<<20 || req.Cpu().MilliValue() > 500 || req.Memory().Value() > 512<<20 {
			t.Errorf("container %s: resources %+v", c.Name, c.Resources)
		}
	}
	ws := s.Containers[0]
	if ws.Image != "img:1" || ws.Command[0] != "/.cws/cws-agent" || s.InitContainers[0].Image != "cws:1" {
		t.Errorf("images/commands: %s %v, init %s", ws.Image, ws.Command, s.InitContainers[0].Image)
	}
	for _, e := range ws.Env {
		if strings.Contains(e.Value, "sekrit") || e.Value == "planted" || (e.Name == "CWS_UID_GID" && e.Value != "1001:1002") {
			t.Errorf("workspace env %s=%s", e.Name, e.Value)
		}
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range ws.VolumeMounts {
		mounts[m.MountPath] = m
	}
	if !mounts["/.cws"].ReadOnly || mounts["/workspace"].Name != volWorkspace || mounts["/tmp"].Name != volTmp {
		t.Errorf("mounts %+v", ws.VolumeMounts)
	}
	for _, v := range s.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %s is a host path", v.Name)
		}
		if v.Name == volTmp && (v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory || v.EmptyDir.SizeLimit.Value() != 64<<20) {
			t.Errorf("/tmp volume %+v", v)
		}
	}
	if p.Annotations[sandbox.LabelSession] != "s-1" || p.Annotations[sandbox.LabelImage] != "img:1" || p.Labels[labelEgress] != "" {
		t.Errorf("labels %v annotations %v", p.Labels, p.Annotations)
	}
}

func TestPodClaimAndEgress(t *testing.T) {
	d := testDriver(Config{AgentImage: "cws:1", StorageClass: "fast"})
	p := d.pod("cws-s-2", "cws-ws-s-2", sandbox.Spec{Session: "s-2", Image: "img", Network: true}, "x")
	if claimOf(p) != "cws-ws-s-2" || p.Labels[labelEgress] != "true" {
		t.Errorf("claim %q, egress label %q", claimOf(p), p.Labels[labelEgress])
	}
	c := d.claim("cws-ws-s-2", nil, nil)
	if *c.Spec.StorageClassName != "fast" || c.Spec.Resources.Requests.Storage().Value() != DefaultWorkspaceBytes {
		t.Errorf("claim %+v", c.Spec)
	}
}

func TestValidateSessionNames(t *testing.T) {
	for id, ok := range map[string]bool{"s-abcdefghij234567abcd": true, "S-UPPER": false, "a_b": false, strings.Repeat("a", 53): false, "a.b": false} {
		if err := validate(sandbox.Spec{Session: id, Image: "i"}); (err == nil) != ok {
			t.Errorf("validate(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}

func TestPodState(t *testing.T) {
	run := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
		{Name: ctrWorkspace, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
	if r, s := podState(run); !r || s {
		t.Errorf("running pod: %v %v", r, s)
	}
	evicted := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}}
	if r, s := podState(evicted); r || !s {
		t.Errorf("evicted pod: %v %v", r, s)
	}
	pending := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}
	if r, s := podState(pending); r || s {
		t.Errorf("pending pod: %v %v", r, s)
	}
}
