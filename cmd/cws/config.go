package main

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/egress"
	"github.com/cwsdev/cws/sandbox/docker"
	"github.com/cwsdev/cws/sandbox/kube"
	"github.com/cwsdev/cws/secrets"
	"github.com/cwsdev/cws/version"
	"github.com/cwsdev/cws/workspace"
	"github.com/spf13/pflag"
)

// Config is cws serve's one configuration, from flags with CWS_* fallbacks.
type Config struct {
	Addr         string        // listen address; default 127.0.0.1:9960
	PublicURL    string        // base URL clients use; empty: http://<addr>
	TenantsFile  string        // tenants YAML; empty needs --dev
	RedisURL     string        // empty: the embedded in-memory store
	DefaultImage string        // workspace image when none is asked for
	AgentBinary  string        // static cws-agent to inject; empty: next to this binary
	Dev          bool          // create a dev tenant and print a token
	Instance     string        // cws.instance label: which sandboxes this deployment owns
	LogFormat    string        // text or json
	LogLevel     string        // debug, info, warn, error
	ReapEvery    time.Duration // reaper and reconcile interval
	DrainTimeout time.Duration // how long shutdown waits for in-flight requests (the grace period)
	StoreTimeout time.Duration // deadline of each session-store operation
	// AgentTransport is how cws reaches the agents: auto, socket or exec
	// (docker.Config.Transport); AgentSocketDir is the host directory of their sockets.
	AgentTransport string
	AgentSocketDir string
	Pool           []string // warm pools, IMAGE=N each; empty: none (with --dev: 2 of the default image)
	PoolMax        int      // cap on pooled containers over all images; zero: the sum of the pools
	PoolOwner      string   // this replica's name on its pooled containers; empty: the host name

	pools []docker.PoolSize // Pool, parsed by validate

	// Driver is the sandbox engine: docker (the default) or kubernetes.
	Driver string
	// The Kubernetes driver's settings (sandbox/kube.Config).
	Kubeconfig         string
	KubeNamespace      string
	KubeStorageClass   string
	KubeAgentImage     string
	KubeTransport      string
	KubeRuntimeClass   string
	KubeUserNamespaces bool
	KubeRequestPercent int

	TokenCacheSize   int           // verified tokens remembered; 0 turns the cache off
	SessionCacheSize int           // session records cached per replica; 0 turns the cache off
	RenewFlush       time.Duration // how often batched idle-TTL renewals are written
	LocalReads       bool          // answer reads through the workspace root agents send on the socket path

	// Sessions' lives (a tenant's policy may shorten each).
	SessionTTL   time.Duration // idle time before a session is deleted
	MaxLifetime  time.Duration // a session's longest life
	SuspendAfter time.Duration // idle time before a session is suspended; 0: never
	ArchiveAfter time.Duration // suspended time before a session is archived; 0: never
	// SnapshotStore is where snapshots and archives go: file:///dir or s3://bucket/prefix;
	// "none" turns snapshots, forks' and archives' store off.
	SnapshotStore    string
	snapshotStoreSet bool // given by flag or CWS_SNAPSHOT_STORE, not the default

	// The network edges.
	EgressAllowPrivate []string      // CIDRs (or IPs) exempt from the proxy's private-address refusal
	EgressDeny         []string      // CIDRs the proxy always refuses (cluster service and pod ranges)
	EgressIdle         time.Duration // an egress connection that moves nothing this long is closed
	EgressResolve      []string      // NAME=IP pins, ahead of DNS
	// SecretsKeyFile holds the key that seals the tenants' secrets (32 random bytes,
	// hex); SecretsKey is it given directly (CWS_SECRETS_KEY). Neither: no secrets.
	SecretsKeyFile, SecretsKey string
	secretsKey                 *secrets.Key // parsed by validate
	PreviewDomain              string       // host-based preview links: {port}-{session}.DOMAIN
	PreviewMaxConns            int          // exchanges under way at once with one session's ports

	AdminTenant string        // tenant whose tokens with scope admin see every tenant
	UsageEvery  time.Duration // how often sessions' usage is sampled; 0: never
}

func (c *Config) flags(f *pflag.FlagSet, getenv func(string) string) {
	f.StringVar(&c.Addr, "addr", envDefault(getenv, "CWS_ADDR", "127.0.0.1:9960"), "listen address [CWS_ADDR]")
	f.StringVar(&c.PublicURL, "public-url", getenv("CWS_PUBLIC_URL"), "base URL clients reach cws at, e.g. https://cws.example (default http://ADDR) [CWS_PUBLIC_URL]")
	f.StringVar(&c.TenantsFile, "tenants", getenv("CWS_TENANTS"), "tenants file (YAML) [CWS_TENANTS]")
	f.StringVar(&c.RedisURL, "redis-url", getenv("CWS_REDIS_URL"), "Redis URL, e.g. redis://localhost:6379/0 (empty: embedded in-memory store) [CWS_REDIS_URL]")
	f.StringVar(&c.DefaultImage, "default-image", envDefault(getenv, "CWS_DEFAULT_IMAGE", version.WorkspaceImage), "workspace image when none is asked for [CWS_DEFAULT_IMAGE]")
	f.StringVar(&c.AgentBinary, "agent-binary", getenv("CWS_AGENT_BINARY"), "static cws-agent binary to inject (default: cws-agent next to cws) [CWS_AGENT_BINARY]")
	f.StringVar(&c.Driver, "driver", envDefault(getenv, "CWS_DRIVER", driverDocker), "sandbox engine: docker (one Docker engine) or kubernetes (a pod per session) [CWS_DRIVER]")
	f.StringVar(&c.Kubeconfig, "kubeconfig", getenv("KUBECONFIG"), "kubernetes: kubeconfig file (default: in-cluster config in a pod, else ~/.kube/config) [KUBECONFIG]")
	f.StringVar(&c.KubeNamespace, "kube-namespace", envDefault(getenv, "CWS_KUBE_NAMESPACE", kube.DefaultNamespace), "kubernetes: the namespace of the sessions' pods (must exist) [CWS_KUBE_NAMESPACE]")
	f.StringVar(&c.KubeStorageClass, "kube-storage-class", getenv("CWS_KUBE_STORAGE_CLASS"), "kubernetes: storage class of the workspace claims; empty: an emptyDir, whose files die with the pod [CWS_KUBE_STORAGE_CLASS]")
	f.StringVar(&c.KubeAgentImage, "kube-agent-image", envDefault(getenv, "CWS_KUBE_AGENT_IMAGE", "cws:"+version.Version), "kubernetes: the cws image, whose cws-agent an init container installs into each pod [CWS_KUBE_AGENT_IMAGE]")
	f.StringVar(&c.KubeTransport, "kube-transport", envDefault(getenv, "CWS_KUBE_TRANSPORT", "auto"), "kubernetes: how cws reaches agents: auto, direct (the pod IP) or exec (the API server) [CWS_KUBE_TRANSPORT]")
	f.StringVar(&c.KubeRuntimeClass, "kube-runtime-class", getenv("CWS_KUBE_RUNTIME_CLASS"), "kubernetes: runtimeClassName of every pod, e.g. gvisor (default: none) [CWS_KUBE_RUNTIME_CLASS]")
	f.BoolVar(&c.KubeUserNamespaces, "kube-user-namespaces", getenv("CWS_KUBE_USER_NAMESPACES") == "true", "kubernetes: run pods with hostUsers: false (the cluster and its runtime must support user namespaces) [CWS_KUBE_USER_NAMESPACES]")
	f.IntVar(&c.KubeRequestPercent, "kube-request-percent", envInt(getenv, "CWS_KUBE_REQUEST_PERCENT", kube.DefaultRequestPercent), "kubernetes: the share of its cpu and memory limits a session pod requests (100: Guaranteed QoS; lower packs more idle sessions per node) [CWS_KUBE_REQUEST_PERCENT]")
	f.StringVar(&c.Instance, "instance", envDefault(getenv, "CWS_INSTANCE", "default"), "name of this cws deployment; it manages (and reaps) only sandboxes labelled with it. Replicas of one deployment share it [CWS_INSTANCE]")
	f.BoolVar(&c.Dev, "dev", getenv("CWS_DEV") == "true" || getenv("CWS_DEV") == "1", "without --tenants: create a dev tenant and print a token and the MCP URL [CWS_DEV]")
	f.StringVar(&c.LogFormat, "log-format", envDefault(getenv, "CWS_LOG_FORMAT", "text"), "log format: text or json [CWS_LOG_FORMAT]")
	f.StringVar(&c.LogLevel, "log-level", envDefault(getenv, "CWS_LOG_LEVEL", "info"), "log level: debug, info, warn, error [CWS_LOG_LEVEL]")
	f.DurationVar(&c.ReapEvery, "reap-every", time.Minute, "how often expired sessions and orphan containers are removed")
	f.DurationVar(&c.DrainTimeout, "drain-timeout", envDuration(getenv, "CWS_DRAIN_TIMEOUT", 25*time.Second), "on SIGTERM, how long in-flight requests may finish (keep it below the pod's terminationGracePeriodSeconds) [CWS_DRAIN_TIMEOUT]")
	f.StringVar(&c.AgentTransport, "agent-transport", envDefault(getenv, "CWS_AGENT_TRANSPORT", docker.TransportAuto), "how cws reaches workspace agents: auto (a unix socket when the Docker engine is local, else docker exec), socket, or exec [CWS_AGENT_TRANSPORT]")
	f.StringVar(&c.AgentSocketDir, "agent-socket-dir", envDefault(getenv, "CWS_AGENT_SOCKET_DIR", docker.DefaultSocketDir), "host directory of the agents' sockets (absolute); when cws runs in a container, mount it at the same path [CWS_AGENT_SOCKET_DIR]")
	f.StringArrayVar(&c.Pool, "pool", envList(getenv, "CWS_POOL"), "warm pool: keep N started, agent-ready containers of IMAGE for new sessions, as IMAGE=N; repeatable (default: none; with --dev, 2 of --default-image; IMAGE=0 turns one off) [CWS_POOL, comma-separated]")
	f.IntVar(&c.PoolMax, "pool-max", envInt(getenv, "CWS_POOL_MAX", 0), "most pooled containers over all images (0: the sum of --pool) [CWS_POOL_MAX]")
	f.StringVar(&c.PoolOwner, "pool-owner", getenv("CWS_POOL_OWNER"), "this replica's name on its pooled containers; replicas sharing an engine need distinct ones, and a stable one lets a restart adopt its pool (default: the host name) [CWS_POOL_OWNER]")
	f.DurationVar(&c.StoreTimeout, "store-timeout", envDuration(getenv, "CWS_STORE_TIMEOUT", time.Second), "deadline of each session-store (Redis) operation; past it, calls fail fast with a retryable error [CWS_STORE_TIMEOUT]")
	f.IntVar(&c.TokenCacheSize, "token-cache-size", envInt(getenv, "CWS_TOKEN_CACHE_SIZE", auth.DefaultTokenCacheSize), "verified tokens remembered until their exp (at most 5 min); 0 verifies every request in full [CWS_TOKEN_CACHE_SIZE]")
	f.IntVar(&c.SessionCacheSize, "session-cache-size", envInt(getenv, "CWS_SESSION_CACHE_SIZE", workspace.DefaultSessionCacheSize), "session records each replica caches for tool calls (kept exact through Redis pub/sub); 0 reads the store on every call [CWS_SESSION_CACHE_SIZE]")
	f.BoolVar(&c.LocalReads, "local-reads", !envOff(getenv("CWS_LOCAL_READS")), "on the socket transport, answer readFile and stat in cws itself, through the workspace root each agent sends, as the agent's own uid:gid (needs root, else reads go to the agent) [CWS_LOCAL_READS]")
	f.DurationVar(&c.SessionTTL, "session-ttl", envDuration(getenv, "CWS_SESSION_TTL", 7*24*time.Hour), "how long a session lives without a call before it is deleted, files and all (a tenant's sessionTTL may shorten it); suspended time counts [CWS_SESSION_TTL]")
	f.DurationVar(&c.MaxLifetime, "max-lifetime", envDuration(getenv, "CWS_MAX_LIFETIME", 30*24*time.Hour), "the longest a session lives, used or not (a tenant's maxLifetime may shorten it) [CWS_MAX_LIFETIME]")
	f.DurationVar(&c.SuspendAfter, "suspend-after", envDuration(getenv, "CWS_SUSPEND_AFTER", 10*time.Minute), "suspend a session after this long without a call: its sandbox stops, its files stay, the next call wakes it; 0 never (a tenant's suspendAfter wins) [CWS_SUSPEND_AFTER]")
	f.DurationVar(&c.ArchiveAfter, "archive-after", envDuration(getenv, "CWS_ARCHIVE_AFTER", 24*time.Hour), "move a session suspended this long into the snapshot store, freeing its volume; 0 never (a tenant's archiveAfter wins) [CWS_ARCHIVE_AFTER]")
	f.StringVar(&c.SnapshotStore, "snapshot-store", envDefault(getenv, "CWS_SNAPSHOT_STORE", defaultSnapshotStore(getenv)), "where snapshots and archived sessions go: file:///dir (one host) or s3://bucket/prefix (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION); none turns it off [CWS_SNAPSHOT_STORE]")
	f.StringArrayVar(&c.EgressAllowPrivate, "egress-allow-private", envList(getenv, "CWS_EGRESS_ALLOW_PRIVATE"), "a CIDR or IP the workspaces' egress proxy may reach although it is private, loopback or link-local (an on-prem mirror, a test server); repeatable [CWS_EGRESS_ALLOW_PRIVATE, comma-separated]")
	f.StringArrayVar(&c.EgressDeny, "egress-deny", envList(getenv, "CWS_EGRESS_DENY"), "a CIDR the egress proxy never reaches, whatever the policy (a cluster's service or pod range that is not private); repeatable [CWS_EGRESS_DENY]")
	f.StringArrayVar(&c.EgressResolve, "egress-resolve", envList(getenv, "CWS_EGRESS_RESOLVE"), "NAME=IP: resolve NAME to IP for the egress proxy, ahead of DNS, like curl --resolve (names without DNS; tests); the address is still checked; repeatable [CWS_EGRESS_RESOLVE]")
	f.StringVar(&c.SecretsKeyFile, "secrets-key-file", getenv("CWS_SECRETS_KEY_FILE"), "file holding the key that seals the tenants' secrets: 32 random bytes, hex-encoded (openssl rand -hex 32); without it (or CWS_SECRETS_KEY) the secrets API answers 501 [CWS_SECRETS_KEY_FILE]")
	c.SecretsKey = getenv("CWS_SECRETS_KEY")
	f.DurationVar(&c.EgressIdle, "egress-idle-timeout", envDuration(getenv, "CWS_EGRESS_IDLE_TIMEOUT", 5*time.Minute), "close an egress connection that moved nothing either way for this long [CWS_EGRESS_IDLE_TIMEOUT]")
	f.IntVar(&c.PreviewMaxConns, "preview-max-conns", envInt(getenv, "CWS_PREVIEW_MAX_CONNS", workspace.DefaultMaxPortConns), "the most exchanges under way at once with one session's ports (proxied requests, WebSockets, port-forward tunnels), on this replica; more answer 429 [CWS_PREVIEW_MAX_CONNS]")
	f.StringVar(&c.PreviewDomain, "preview-domain", getenv("CWS_PREVIEW_DOMAIN"), "make preview links host-based, https://PORT-SESSION.DOMAIN/ (a wildcard DNS name and certificate for *.DOMAIN pointing at cws); empty: path-based links under --public-url [CWS_PREVIEW_DOMAIN]")
	f.StringVar(&c.AdminTenant, "admin-tenant", getenv("CWS_ADMIN_TENANT"), "the tenant whose tokens carrying scope admin get the operator's view across tenants (/v1/admin, the console's overview); empty: nobody [CWS_ADMIN_TENANT]")
	f.DurationVar(&c.UsageEvery, "usage-every", envDuration(getenv, "CWS_USAGE_EVERY", workspace.DefaultUsageEvery), "how often every running session's CPU, memory and processes are sampled from the engine (one request per session; disk is walked every minute); 0 never [CWS_USAGE_EVERY]")
	f.DurationVar(&c.RenewFlush, "renew-flush", envDuration(getenv, "CWS_RENEW_FLUSH", workspace.DefaultRenewFlush), "how often the idle-TTL renewals of tool calls are written to the store, batched [CWS_RENEW_FLUSH]")
}

// cacheSize maps a flag's size (0: off) to a package's (negative: off, 0: default).
func cacheSize(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// envInt reads an integer from key, or def when unset. A malformed value yields -1,
// which validate refuses.
func envInt(getenv func(string) string, key string, def int) int {
	v := getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return n
}

// defaultSnapshotStore is a directory of the user's: $XDG_DATA_HOME/cws/snapshots, else
// ~/.local/share/cws/snapshots; /var/lib/cws/snapshots without a home.
func defaultSnapshotStore(getenv func(string) string) string {
	if d := getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
		return "file://" + filepath.Join(d, "cws", "snapshots")
	}
	if h := getenv("HOME"); filepath.IsAbs(h) && h != "/" {
		return "file://" + filepath.Join(h, ".local", "share", "cws", "snapshots")
	}
	return "file:///var/lib/cws/snapshots"
}

// validate checks the configuration and fills derived defaults; errors say what to do.
func (c *Config) validate() error {
	c.snapshotStoreSet = c.SnapshotStore != "" && c.SnapshotStore != defaultSnapshotStore(os.Getenv)
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return fmt.Errorf("--addr %q: want host:port, e.g. 127.0.0.1:9960", c.Addr)
	}
	if c.PublicURL == "" {
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		c.PublicURL = "http://" + net.JoinHostPort(host, port)
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	if c.TenantsFile == "" && !c.Dev {
		return fmt.Errorf("no tenants: pass --tenants FILE (see README: Configuration), or --dev for a local dev tenant")
	}
	if c.AgentBinary == "" {
		exe, err := os.Executable()
		if err == nil {
			c.AgentBinary = filepath.Join(filepath.Dir(exe), "cws-agent")
		}
	}
	if _, err := os.Stat(c.AgentBinary); err != nil {
		return fmt.Errorf("agent binary %s: %v (build it with `make build`, or pass --agent-binary)", c.AgentBinary, err)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return fmt.Errorf("--log-format %q: want text or json", c.LogFormat)
	}
	switch c.Driver {
	case driverDocker:
		switch c.AgentTransport {
		case docker.TransportAuto, docker.TransportSocket, docker.TransportExec:
		default:
			return fmt.Errorf("--agent-transport %q: want auto, socket or exec", c.AgentTransport)
		}
		if !filepath.IsAbs(c.AgentSocketDir) {
			return fmt.Errorf("--agent-socket-dir %q: want an absolute path on the Docker host, e.g. %s", c.AgentSocketDir, docker.DefaultSocketDir)
		}
	case driverKubernetes:
		switch c.KubeTransport {
		case "auto", kube.TransportDirect, kube.TransportExec:
		default:
			return fmt.Errorf("--kube-transport %q: want auto, direct or exec", c.KubeTransport)
		}
		if c.KubeRequestPercent < 1 || c.KubeRequestPercent > 100 {
			return fmt.Errorf("--kube-request-percent %d: want 1 to 100", c.KubeRequestPercent)
		}
		if c.KubeNamespace == "" || c.KubeAgentImage == "" {
			return fmt.Errorf("--kube-namespace and --kube-agent-image must not be empty")
		}
	default:
		return fmt.Errorf("--driver %q: want docker or kubernetes", c.Driver)
	}
	if c.SessionTTL <= 0 || c.MaxLifetime <= 0 {
		return fmt.Errorf("--session-ttl and --max-lifetime must be positive")
	}
	for _, p := range append(slices.Clone(c.EgressAllowPrivate), c.EgressDeny...) {
		if _, err := egress.ParsePrefix(p); err != nil {
			return fmt.Errorf("--egress-allow-private/--egress-deny %q: %v (give a CIDR such as 10.0.0.0/8, or an IP)", p, err)
		}
	}
	for _, r := range c.EgressResolve {
		if _, _, err := parseResolve(r); err != nil {
			return err
		}
	}
	if c.SecretsKeyFile != "" {
		b, err := os.ReadFile(c.SecretsKeyFile)
		if err != nil {
			return fmt.Errorf("--secrets-key-file: %v", err)
		}
		if c.secretsKey, err = secrets.ParseKey(string(b)); err != nil {
			return fmt.Errorf("--secrets-key-file %s: %v", c.SecretsKeyFile, err)
		}
	} else if c.SecretsKey != "" {
		var err error
		if c.secretsKey, err = secrets.ParseKey(c.SecretsKey); err != nil {
			return fmt.Errorf("CWS_SECRETS_KEY: %v", err)
		}
	}
	if c.SuspendAfter < 0 || c.ArchiveAfter < 0 {
		return fmt.Errorf("--suspend-after and --archive-after must not be negative (0 turns them off)")
	}
	if c.ReapEvery <= 0 || c.DrainTimeout <= 0 || c.StoreTimeout <= 0 || c.RenewFlush <= 0 {
		return fmt.Errorf("--reap-every, --drain-timeout, --store-timeout and --renew-flush must be positive")
	}
	if c.TokenCacheSize < 0 || c.SessionCacheSize < 0 {
		return fmt.Errorf("--token-cache-size and --session-cache-size must be 0 (off) or positive")
	}
	if c.PreviewMaxConns < 1 {
		return fmt.Errorf("--preview-max-conns must be at least 1, got %d", c.PreviewMaxConns)
	}
	return c.parsePools()
}

// devPoolSize is the pool of the default image that --dev keeps unless --pool says.
const devPoolSize = 2

// parsePools turns --pool IMAGE=N into pool sizes; --dev adds one for the default
// image unless --pool names it.
func (c *Config) parsePools() error {
	named := map[string]bool{}
	c.pools = nil
	for _, p := range c.Pool {
		i := strings.LastIndex(p, "=")
		if i <= 0 {
			return fmt.Errorf("--pool %q: want IMAGE=N, e.g. %s=4", p, version.WorkspaceImage)
		}
		n, err := strconv.Atoi(p[i+1:])
		if err != nil || n < 0 {
			return fmt.Errorf("--pool %q: N must be a whole number, 0 or more", p)
		}
		named[p[:i]] = true
		if n > 0 {
			c.pools = append(c.pools, docker.PoolSize{Image: p[:i], Size: n})
		}
	}
	if c.Dev && c.TenantsFile == "" && !named[c.DefaultImage] {
		c.pools = append(c.pools, docker.PoolSize{Image: c.DefaultImage, Size: devPoolSize})
	}
	if c.PoolMax < 0 {
		return fmt.Errorf("--pool-max must be 0 (the sum of the pools) or more")
	}
	return nil
}

// envList reads a comma-separated list from key.
func envList(getenv func(string) string, key string) []string {
	v := getenv(key)
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// envDuration reads a duration from key, or def when unset. A malformed value yields
// -1, which validate refuses.
func envDuration(getenv func(string) string, key string, def time.Duration) time.Duration {
	v := getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return -1
	}
	return d
}

// envOff says whether a boolean setting that defaults to on was turned off.
func envOff(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "false", "0", "no", "off":
		return true
	}
	return false
}

// parseResolve reads an --egress-resolve NAME=IP.
func parseResolve(s string) (string, netip.Addr, error) {
	name, ip, ok := strings.Cut(s, "=")
	a, err := netip.ParseAddr(strings.TrimSpace(ip))
	name = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(name)), ".")
	if !ok || err != nil || name == "" {
		return "", netip.Addr{}, fmt.Errorf("--egress-resolve %q: give NAME=IP, e.g. mirror.corp=10.1.2.3", s)
	}
	return name, a.Unmap(), nil
}
