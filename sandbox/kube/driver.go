// Package kube is the Kubernetes driver for sandboxes: one hardened pod per session in
// one namespace, behind the same interface as sandbox/docker, so that the tools, the
// policy and the agent's protections are the same on both engines.
//
// What the driver owns carries the sandbox.Label* keys, as on Docker: a few selectable
// labels (cws.managed, cws.instance, cws.pool, cws.egress) and every cws.* key, with
// the spec's own labels, as annotations (label values can't hold an image name or a
// time). They are the ground truth for List, reconcile and adoption.
//
// The driver reads pods from one label-scoped informer whose cache keeps only the
// fields it reads (cache.go): a tool call on the direct path makes no API request, and
// nothing polls the API server. The agent is delivered by an init container of the cws
// image (`cws-agent install`), so any image works; cws reaches it over the pod's IP
// behind the per-pod secret handshake, or through the API server's exec stream
// (transport.go).
package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/singleflight"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/pool"
	"github.com/cwsdev/cws/version"
)

// Defaults of Config fields that are zero, and of sandbox.Limits fields that are zero.
const (
	DefaultNamespace      = "cws-sessions"
	DefaultWorkspaceBytes = 10 << 30 // the workspace claim's size (or the emptyDir's limit)
	DefaultNanoCPUs       = 1_000_000_000
	DefaultMemoryBytes    = 1 << 30
	DefaultPids           = 256
	DefaultNoFile         = 4096
	DefaultFileSize       = 1 << 30
	DefaultTmpSizeBytes   = 256 << 20
	// DefaultRequestPercent: a pod requests this share of its limits, so that a node
	// holds many idle sessions while each may burst to its limit.
	DefaultRequestPercent = 10
	DefaultInstance       = "default"
)

// Transports to agents.
const (
	TransportAuto   = ""       // direct, falling back to exec when the pod IP can't be reached
	TransportDirect = "direct" // the pod's IP and agent port, behind the secret handshake
	TransportExec   = "exec"   // the API server's exec stream into `cws-agent attach`
)

var packageDefaults = sandbox.Limits{
	NanoCPUs: DefaultNanoCPUs, MemoryBytes: DefaultMemoryBytes, Pids: DefaultPids,
	NoFile: DefaultNoFile, FileSizeBytes: DefaultFileSize, TmpSizeBytes: DefaultTmpSizeBytes,
}

// Config configures a Driver.
type Config struct {
	// Kubeconfig is a kubeconfig file. Empty means the usual resolution: in-cluster
	// config when cws runs in a pod, else $KUBECONFIG, else ~/.kube/config.
	Kubeconfig string
	// Namespace holds every session's pod, claim and the egress policy. Empty means
	// DefaultNamespace. It must exist.
	Namespace string
	// StorageClass makes each workspace a PersistentVolumeClaim of this class, which
	// outlives its pod (an evicted pod's session comes back with its files). Empty
	// means an emptyDir with a size limit: the files live as long as the pod.
	StorageClass string
	// WorkspaceBytes sizes the workspace claim (or limits the emptyDir). Zero means
	// DefaultWorkspaceBytes.
	WorkspaceBytes int64
	// AgentImage is the cws image, whose /cws-agent the init container installs into
	// each pod. Required.
	AgentImage string
	// AgentBinary is the local cws-agent binary: its hash names the agent version on
	// pods (annotation cws.agent), so that the pool never adopts an older agent's pod.
	AgentBinary string
	// RuntimeClass, if set, is every pod's runtimeClassName (gVisor, Kata).
	RuntimeClass string
	// UserNamespaces sets hostUsers: false (the pod's uids are not the node's). The
	// cluster must support it (Kubernetes ≥ 1.30 with a runtime that does).
	UserNamespaces bool
	// Transport is TransportAuto, TransportDirect or TransportExec.
	Transport string
	// RequestPercent is the share of its limits a pod requests. Zero means
	// DefaultRequestPercent; 100 makes requests equal limits (Guaranteed QoS).
	RequestPercent int
	// Instance names the cws deployment that owns the sandboxes (label cws.instance).
	Instance string
	// Defaults applies to every sandbox.Limits field that is zero in a Spec.
	Defaults sandbox.Limits

	Pool        []pool.Size
	PoolMax     int
	PoolFillers int
	PoolOwner   string // empty means the host name (a pod's name in a cluster)
	PoolMaxAge  time.Duration
	// PoolRefillHold: see pool.Config.RefillHold (zero: 1 s; negative: none).
	PoolRefillHold time.Duration
	PoolObserver   pool.Observer

	// NoEgressPolicy skips the namespace's default-deny egress NetworkPolicy (when
	// the operator manages policies).
	NoEgressPolicy bool

	Log *slog.Logger

	// RESTConfig, when set, is used instead of Kubeconfig (tests, embedding).
	RESTConfig *rest.Config
}

// Driver runs sandboxes as Kubernetes pods. It is safe for concurrent use.
type Driver struct {
	cfg       Config
	log       *slog.Logger
	rest      *rest.Config
	cs        kubernetes.Interface
	ns        string
	instance  string
	defaults  sandbox.Limits
	agentHash string
	requests  *RequestCounter

	factory informers.SharedInformerFactory
	pods    corelisters.PodNamespaceLister
	changed chan struct{} // closed and replaced whenever the pod cache changes
	chMu    sync.Mutex
	stop    chan struct{}

	transport string
	directBad time.Time // when the direct path last failed to dial (auto falls back)
	tMu       sync.Mutex

	pool    *pool.Pool
	conns   connSet            // the agent streams, by pod (conns.go)
	resumes singleflight.Group // one resume per pod at a time (suspend.go)
}

var klogOnce sync.Once

var labelValueRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)

// New connects to the cluster, starts the pod informer and waits for its cache. It
// does not create anything; the egress policy is ensured here unless switched off.
func New(ctx context.Context, cfg Config) (*Driver, error) {
	if cfg.AgentImage == "" {
		return nil, errors.New("kubernetes driver: the agent image (the cws image) is required: --kube-agent-image")
	}
	instance := cmp.Or(cfg.Instance, DefaultInstance)
	if !labelValueRE.MatchString(instance) {
		return nil, fmt.Errorf("kubernetes driver: instance %q must be a lower-case label value (a-z, 0-9, '.', '_', '-'; at most 63)", instance)
	}
	switch cfg.Transport {
	case TransportAuto, TransportDirect, TransportExec:
	default:
		return nil, fmt.Errorf("kubernetes driver: transport %q: want direct, exec or empty (auto)", cfg.Transport)
	}
	rc := cfg.RESTConfig
	if rc == nil {
		var err error
		if rc, err = restConfig(cfg.Kubeconfig); err != nil {
			return nil, err
		}
	}
	// client-go reports through klog what the driver handles itself (a closed exec
	// stream is an "Unhandled Error" to it); the driver returns and logs its errors.
	klogOnce.Do(func() { klog.SetLogger(logr.Discard()) })
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = cmp.Or(rc.QPS, 50), cmp.Or(rc.Burst, 100)
	counter := &RequestCounter{}
	rc.Wrap(counter.wrap)
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes driver: client: %w", err)
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "sandbox/kube")
	if cfg.PoolOwner == "" {
		cfg.PoolOwner, _ = os.Hostname()
	}
	hash := version.Version
	if cfg.AgentBinary != "" {
		if hash, err = agentHash(cfg.AgentBinary); err != nil {
			return nil, fmt.Errorf("kubernetes driver: hash agent binary: %w", err)
		}
	}
	d := &Driver{
		cfg: cfg, log: log, rest: rc, cs: cs, ns: cmp.Or(cfg.Namespace, DefaultNamespace), instance: instance,
		defaults: sandbox.WithDefaults(cfg.Defaults, packageDefaults), agentHash: hash, requests: counter,
		changed: make(chan struct{}), stop: make(chan struct{}), transport: cfg.Transport,
		pool: pool.New(pool.Config{Sizes: cfg.Pool, Max: cfg.PoolMax, Fillers: cfg.PoolFillers, Owner: cfg.PoolOwner,
			MaxAge: cfg.PoolMaxAge, RefillHold: cfg.PoolRefillHold, Observer: cfg.PoolObserver, Log: log}),
	}
	if err := d.ensureNamespace(ctx); err != nil {
		return nil, err
	}
	if err := d.startCache(ctx); err != nil {
		close(d.stop)
		return nil, err
	}
	if !cfg.NoEgressPolicy {
		if err := d.ensureEgressPolicy(ctx); err != nil {
			log.Warn("no default-deny egress policy: sessions without egress are not cut off by the network", "err", err)
		}
	}
	log.Info("kubernetes driver ready", "namespace", d.ns, "instance", instance, "storage_class", cfg.StorageClass,
		"transport", cmp.Or(cfg.Transport, "auto"), "api", rc.Host)
	return d, nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		if rc, err := rest.InClusterConfig(); err == nil {
			return rc, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes driver: no cluster: not in a pod, and no kubeconfig (%v); give --kubeconfig or set KUBECONFIG", err)
	}
	return rc, nil
}

// Close stops the informer. Sandboxes outlive the driver.
func (d *Driver) Close() error {
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	if d.factory != nil {
		d.factory.Shutdown()
	}
	return nil
}

// Namespace is where the driver's sessions live.
func (d *Driver) Namespace() string { return d.ns }

// Requests is the number of API requests the driver has made (watches included, as
// one each): the bench counts a session's life with it.
func (d *Driver) Requests() int64 { return d.requests.Load() }

// PoolReady is how many pooled pods of image are ready to be handed out.
func (d *Driver) PoolReady(image string) int { return d.pool.Ready(image) }

// RunPool adopts this owner's healthy pooled pods and keeps the pools full until ctx
// ends. Without pools configured it returns at once.
func (d *Driver) RunPool(ctx context.Context) { d.pool.Run(ctx, poolEngine{d}) }

// Transport names the path to agents and why.
func (d *Driver) Transport() (name, why string) {
	switch d.transport {
	case TransportDirect:
		return TransportDirect, "asked for (--kube-transport direct)"
	case TransportExec:
		return TransportExec, "asked for (--kube-transport exec)"
	}
	return "auto", "the pod's IP behind the secret handshake; the API server's exec stream when the IP can't be reached"
}

// waitCache waits for the informer to sync.
func waitCache(ctx context.Context, synced ...cache.InformerSynced) error {
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("kubernetes driver: the pod cache did not sync: %w", cmp.Or(ctx.Err(), errors.New("stopped")))
	}
	return nil
}

// agentPath is the agent binary inside every pod.
const agentPath = sandbox.AgentDir + "/cws-agent"

// The agent's TCP listener in a pod.
const (
	envListen = agent.EnvListen
	agentPort = agent.DefaultPort
)

// PoolSize asks for a warm pool of Size pods of Image.
type PoolSize = pool.Size

// ensureNamespace makes the sessions' namespace when it is missing and cws may (a
// Helm install makes it, and grants cws nothing cluster-wide).
func (d *Driver) ensureNamespace(ctx context.Context) error {
	_, err := d.cs.CoreV1().Namespaces().Get(ctx, d.ns, metav1.GetOptions{})
	switch {
	case err == nil, apierrors.IsForbidden(err):
		return nil // there, or not ours to see: the first create will tell
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("kubernetes driver: namespace %s: %w (is the API server at %s reachable?)", d.ns, err, d.rest.Host)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: d.ns, Labels: map[string]string{
		sandbox.LabelManaged: "true", "pod-security.kubernetes.io/enforce": "restricted"}}}
	if _, err := d.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubernetes driver: namespace %s does not exist and cws can't make it (%v): create it with `kubectl create namespace %s`", d.ns, err, d.ns)
	}
	d.log.Info("made the sessions' namespace", "namespace", d.ns)
	return nil
}
