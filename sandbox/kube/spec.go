package kube

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
)

// The pod of a session, hardened as the Docker container is, mapped one to one:
//
//	Docker                               Kubernetes
//	User 0, init drops to the agent uid  runAsNonRoot, runAsUser/runAsGroup = the tool uid:gid;
//	                                     the agent shares it and guards itself (same-uid mode:
//	                                     non-dumpable, every tool process in a Landlock domain
//	                                     scoped from signals, ptrace and its abstract socket)
//	CapDrop ALL (+ CHOWN SETUID ...)     capabilities drop [ALL], nothing added
//	no-new-privileges                    allowPrivilegeEscalation: false
//	ReadonlyRootfs, tmpfs /tmp           readOnlyRootFilesystem, a memory emptyDir at /tmp
//	default seccomp profile              seccompProfile RuntimeDefault
//	never the Docker socket              automountServiceAccountToken: false, enableServiceLinks: false
//	NetworkMode none                     the namespace's default-deny egress NetworkPolicy
//	NanoCPUs, Memory (= MemorySwap)      limits (requests a share of them), no swap by default
//	PidsLimit                            the node's podPidsLimit (Kubernetes has no per-pod field)
//	Ulimits nofile, fsize                set by the agent's init on itself (CWS_RLIMIT_*)
//	agent volume, read-only              an emptyDir that the init container (the cws image)
//	                                     fills with cws-agent, mounted read-only at /.cws
//	workspace volume                     a PVC (--kube-storage-class), or a size-limited emptyDir
//
// plus hostUsers: false and a runtimeClassName where the operator asks for them.

// runDirBytes bounds the pod's /.cws-run (memory, charged only as used).
const runDirBytes = 16 << 20

// Names of the pod's parts.
const (
	ctrWorkspace  = "workspace"
	ctrInstall    = "cws-agent"
	volWorkspace  = "workspace"
	volAgent      = "cws-agent"
	volRun        = "cws-run"
	volTmp        = "tmp"
	envUIDGID     = "CWS_UID_GID"
	envRlimNoFile = "CWS_RLIMIT_NOFILE"
	envRlimFSize  = "CWS_RLIMIT_FSIZE"
)

// Selectable labels (besides cws.managed and cws.instance).
const (
	labelPooled = "cws.pool"   // "true" on pooled pods; the image is in the cws.pool annotation
	labelEgress = "cws.egress" // "true" on pods the egress policy lets out
)

// Annotations only the driver reads.
const (
	annAgent   = sandbox.LabelAgent  // the agent's version hash
	annSecret  = sandbox.LabelSecret // the agent's secret (hex), for cws and the init container only
	annDeleted = "cws.deleted"       // "true" once Remove began
)

// podName is a session's pod; claimName its workspace claim. Session ids are DNS
// labels (cws makes them "s-" and 20 base32 characters); others are refused.
func podName(session string) string   { return "cws-" + session }
func claimName(session string) string { return "cws-ws-" + session }

var dnsLabelRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,50}[a-z0-9])?$`)

// validate is sandbox.Validate plus what Kubernetes names need.
func validate(spec sandbox.Spec) error {
	if err := sandbox.Validate(spec); err != nil {
		return err
	}
	if !dnsLabelRE.MatchString(spec.Session) {
		return fmt.Errorf("%w: session id %q must be a DNS label of at most 52 characters (a-z, 0-9, '-') on Kubernetes", sandbox.ErrInvalid, spec.Session)
	}
	return nil
}

// randomName is a pooled pod's session-less name part.
func randomName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "pool-" + hex.EncodeToString(b[:])
}

// annotations are the sandbox labels (sandbox.Labels) plus the driver's own.
func (d *Driver) annotations(spec sandbox.Spec, secret string) map[string]string {
	a := sandbox.Labels(spec, d.instance)
	a[annAgent] = d.agentHash
	a[sandbox.LabelSecret] = secret
	return a
}

// podLabels are the selectable labels.
func (d *Driver) podLabels(spec sandbox.Spec) map[string]string {
	l := map[string]string{sandbox.LabelManaged: "true", sandbox.LabelInstance: d.instance}
	if spec.Network {
		l[labelEgress] = "true"
	}
	return l
}

func newSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// claim is the workspace claim of a pod named name.
func (d *Driver) claim(name string, labels, annotations map[string]string) *corev1.PersistentVolumeClaim {
	size := cmp.Or(d.cfg.WorkspaceBytes, DefaultWorkspaceBytes)
	sc := d.cfg.StorageClass
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: d.ns, Labels: labels, Annotations: annotations},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &sc,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI)}},
		},
	}
}

// pod is the hardened pod for spec, named name, with its workspace in claim (empty:
// an emptyDir).
func (d *Driver) pod(name, claim string, spec sandbox.Spec, secret string) *corev1.Pod {
	lim := sandbox.WithDefaults(spec.Limits, d.defaults)
	user := cmp.Or(spec.User, sandbox.DefaultUser)
	uid, gid, _ := sandbox.ParseUser(user)
	uid64, gid64 := int64(uid), int64(gid)
	f := false
	t := true
	ctrSec := &corev1.SecurityContext{
		RunAsNonRoot: &t, RunAsUser: &uid64, RunAsGroup: &gid64,
		AllowPrivilegeEscalation: &f, ReadOnlyRootFilesystem: &t, Privileged: &f,
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	pct := int64(cmp.Or(d.cfg.RequestPercent, DefaultRequestPercent))
	limits := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(lim.NanoCPUs/1_000_000, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(lim.MemoryBytes, resource.BinarySI),
	}
	requests := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(max(lim.NanoCPUs/1_000_000*pct/100, 10), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(max(lim.MemoryBytes*pct/100, 32<<20), resource.BinarySI),
	}
	env := []corev1.EnvVar{}
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		if k != envUIDGID && k != agent.EnvSecret && k != agent.EnvAgentUser && k != envListen && k != envRlimNoFile && k != envRlimFSize && k != agent.EnvEgress {
			env = append(env, corev1.EnvVar{Name: k, Value: spec.Env[k]})
		}
	}
	// No CWS_AGENT_UID_GID: started as the tool uid, without capabilities, the agent's
	// init runs in same-uid mode (see cmd/cws-agent/init.go).
	env = append(env,
		corev1.EnvVar{Name: envUIDGID, Value: user},
		corev1.EnvVar{Name: envListen, Value: ":" + strconv.Itoa(agentPort)},
		corev1.EnvVar{Name: envRlimNoFile, Value: strconv.FormatInt(lim.NoFile, 10)},
		corev1.EnvVar{Name: envRlimFSize, Value: strconv.FormatInt(lim.FileSizeBytes, 10)},
	)
	if !spec.Network {
		// No way out but the agent's egress proxy (the egress NetworkPolicy denies the rest).
		env = append(env, corev1.EnvVar{Name: agent.EnvEgress, Value: "proxy"})
	}
	ws := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		SizeLimit: resource.NewQuantity(cmp.Or(d.cfg.WorkspaceBytes, DefaultWorkspaceBytes), resource.BinarySI)}}
	if claim != "" {
		ws = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}
	}
	if spec.WorkspaceTmpfsBytes > 0 { // tests only: a workspace that can be filled
		ws = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory,
			SizeLimit: resource.NewQuantity(spec.WorkspaceTmpfsBytes, resource.BinarySI)}}
	}
	changePolicy := corev1.FSGroupChangeOnRootMismatch
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: d.ns, Labels: d.podLabels(spec), Annotations: d.annotations(spec, secret)},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever, // cws reconciles, as on Docker
			AutomountServiceAccountToken:  &f,
			EnableServiceLinks:            &f,
			TerminationGracePeriodSeconds: new(int64(2)),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: &t, RunAsUser: &uid64, RunAsGroup: &gid64,
				// The workspace claim is handed to the tool group where the volume type
				// supports it (most CSI drivers); hostPath volumes do not.
				FSGroup: &gid64, FSGroupChangePolicy: &changePolicy,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			InitContainers: []corev1.Container{{
				Name: ctrInstall, Image: d.cfg.AgentImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"/cws-agent", "install", sandbox.AgentDir},
				Env:             []corev1.EnvVar{{Name: agent.EnvSecret, Value: secret}},
				SecurityContext: ctrSec,
				Resources:       corev1.ResourceRequirements{Limits: limits, Requests: requests},
				VolumeMounts: []corev1.VolumeMount{
					{Name: volAgent, MountPath: sandbox.AgentDir},
					{Name: volRun, MountPath: agent.RunDir},
				},
			}},
			Containers: []corev1.Container{{
				Name: ctrWorkspace, Image: spec.Image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{agentPath, "init"},
				WorkingDir:      sandbox.WorkspaceDir,
				Env:             env,
				SecurityContext: ctrSec,
				Resources:       corev1.ResourceRequirements{Limits: limits, Requests: requests},
				VolumeMounts: []corev1.VolumeMount{
					{Name: volWorkspace, MountPath: sandbox.WorkspaceDir},
					{Name: volAgent, MountPath: sandbox.AgentDir, ReadOnly: true},
					{Name: volRun, MountPath: agent.RunDir},
					{Name: volTmp, MountPath: "/tmp"},
				},
				Ports: []corev1.ContainerPort{{Name: "cws-agent", ContainerPort: agentPort, Protocol: corev1.ProtocolTCP}},
			}},
			Volumes: []corev1.Volume{
				{Name: volWorkspace, VolumeSource: ws},
				{Name: volAgent, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: resource.NewQuantity(64<<20, resource.BinarySI)}}},
				// The socket, and the agent's state (request outcomes, the keeper's
				// records): same-uid mode keeps them here, where the tools' Landlock
				// fence lets no tool process write (cmd/cws-agent useRunDirState).
				{Name: volRun, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(runDirBytes, resource.BinarySI)}}},
				{Name: volTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory,
					SizeLimit: resource.NewQuantity(lim.TmpSizeBytes, resource.BinarySI)}}},
			},
		},
	}
	if d.cfg.RuntimeClass != "" {
		p.Spec.RuntimeClassName = &d.cfg.RuntimeClass
	}
	if d.cfg.UserNamespaces {
		p.Spec.HostUsers = &f
	}
	return p
}
