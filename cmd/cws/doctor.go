package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox/agent/server"
	"github.com/cwsdev/cws/sandbox/agent/server/launch"
	"github.com/cwsdev/cws/sandbox/docker"
	"github.com/cwsdev/cws/sandbox/kube"
	"github.com/cwsdev/cws/version"
	"github.com/cwsdev/cws/workspace/policy"
	dockerclient "github.com/docker/docker/client"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

// doctorTimeout bounds each check that talks to something.
const doctorTimeout = 5 * time.Second

func doctorCmd(getenv func(string) string) *cobra.Command {
	var o doctorOptions
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that everything cws needs is in place, and say how to fix what is not",
		Long: `Check what cws serve needs, one line each, ✔ or ✘ with what to do next.

With --driver docker (the default):
  - the Docker engine answers (DOCKER_HOST, or the local socket)
  - the workspace images are present
  - Landlock is available to enforce allowedCommands (when the engine is local)
  - which path cws takes to the workspace agents (a unix socket, or docker exec), and why
  - the workspace volumes' file system (when the engine is local): ext4 without a
    journal makes creating files slow after deletes, so wakes and forks slow down
  - cws-agent sits next to cws (or at --agent-binary)

With --driver kubernetes:
  - the cluster answers (--kubeconfig, KUBECONFIG, or the pod's own credentials)
  - the sessions' namespace exists (--kube-namespace)
  - these credentials may do there every verb the driver uses (the Helm chart's Role)
  - the storage class of the workspace claims exists (--kube-storage-class)
  - the agent image (--kube-agent-image) and the workspace images are on the nodes

Either way:
  - Redis answers, if --redis-url is given
  - the tenants file loads and every tenant's policy parses, if --tenants is given
  - a cws at --server is ready, if one answers there

It exits 1 if any check fails.

Examples:
  cws doctor
  cws doctor --tenants /etc/cws/tenants.yaml --redis-url redis://localhost:6379/0
  cws doctor --image cws-workspace:0.1.0 --image my-team/workspace:latest
  cws doctor --driver kubernetes --kubeconfig ~/.kube/config --kube-namespace cws-sessions`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d := &doctor{w: cmd.OutOrStdout()}
			d.run(cmd.Context(), o)
			if d.failed > 0 {
				fmt.Fprintf(d.w, "\n%d check(s) failed.\n", d.failed)
				return exitError{1}
			}
			fmt.Fprintln(d.w, "\nAll checks passed.")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.tenants, "tenants", getenv("CWS_TENANTS"), "tenants file to check [CWS_TENANTS]")
	f.StringVar(&o.redisURL, "redis-url", getenv("CWS_REDIS_URL"), "Redis to check [CWS_REDIS_URL]")
	f.StringArrayVar(&o.images, "image", []string{envDefault(getenv, "CWS_DEFAULT_IMAGE", version.WorkspaceImage)}, "image that must be present (repeatable)")
	f.StringVar(&o.agentBinary, "agent-binary", getenv("CWS_AGENT_BINARY"), "cws-agent binary to check (default: next to cws) [CWS_AGENT_BINARY]")
	f.StringVar(&o.transport, "agent-transport", envDefault(getenv, "CWS_AGENT_TRANSPORT", docker.TransportAuto), "agent transport to check: auto, socket or exec [CWS_AGENT_TRANSPORT]")
	f.StringVar(&o.socketDir, "agent-socket-dir", envDefault(getenv, "CWS_AGENT_SOCKET_DIR", docker.DefaultSocketDir), "host directory of the agents' sockets [CWS_AGENT_SOCKET_DIR]")
	f.StringVar(&o.driver, "driver", envDefault(getenv, "CWS_DRIVER", driverDocker), "sandbox engine to check: docker or kubernetes [CWS_DRIVER]")
	f.StringVar(&o.kubeconfig, "kubeconfig", getenv("KUBECONFIG"), "kubernetes: kubeconfig file (default: in-cluster config in a pod, else ~/.kube/config) [KUBECONFIG]")
	f.StringVar(&o.kubeNamespace, "kube-namespace", envDefault(getenv, "CWS_KUBE_NAMESPACE", kube.DefaultNamespace), "kubernetes: the namespace of the sessions' pods [CWS_KUBE_NAMESPACE]")
	f.StringVar(&o.kubeStorageClass, "kube-storage-class", getenv("CWS_KUBE_STORAGE_CLASS"), "kubernetes: storage class of the workspace claims [CWS_KUBE_STORAGE_CLASS]")
	f.StringVar(&o.kubeAgentImage, "kube-agent-image", envDefault(getenv, "CWS_KUBE_AGENT_IMAGE", "cws:"+version.Version), "kubernetes: the cws image that delivers the agent [CWS_KUBE_AGENT_IMAGE]")
	f.StringVar(&o.server, "server", envDefault(getenv, "CWS_SERVER", defaultServer), "cws whose /readyz to check, if it answers [CWS_SERVER]")
	return cmd
}

type doctorOptions struct {
	driver           string
	kubeconfig       string
	kubeNamespace    string
	kubeStorageClass string
	kubeAgentImage   string
	tenants          string
	redisURL         string
	images           []string
	agentBinary      string
	server           string
	transport        string
	socketDir        string
}

// doctor prints check results and counts failures.
type doctor struct {
	w      io.Writer
	failed int
}

func (d *doctor) ok(format string, a ...any) { fmt.Fprintf(d.w, "✔ "+format+"\n", a...) }

func (d *doctor) skip(format string, a ...any) { fmt.Fprintf(d.w, "- "+format+"\n", a...) }

// warn reports a degraded but working setup; it is not a failure.
func (d *doctor) warn(hint, format string, a ...any) {
	fmt.Fprintf(d.w, "! "+format+"\n", a...)
	if hint != "" {
		fmt.Fprintf(d.w, "    → %s\n", hint)
	}
}

func (d *doctor) fail(hint, format string, a ...any) {
	d.failed++
	fmt.Fprintf(d.w, "✘ "+format+"\n", a...)
	if hint != "" {
		fmt.Fprintf(d.w, "    → %s\n", hint)
	}
}

func (d *doctor) run(ctx context.Context, o doctorOptions) {
	switch o.driver {
	case driverKubernetes:
		d.kubernetes(ctx, o)
	case driverDocker, "":
		d.docker(ctx, o)
		d.agent(o.agentBinary)
	default:
		d.fail("give --driver docker or --driver kubernetes", "driver %q: unknown", o.driver)
	}
	d.redis(ctx, o.redisURL)
	d.tenants(o.tenants)
	d.server(ctx, o.server)
}

func (d *doctor) docker(ctx context.Context, o doctorOptions) {
	images := o.images
	const hint = "run `make deps` (installs and starts dockerd), or point DOCKER_HOST at a running engine"
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		d.fail(hint, "Docker engine: %v", err)
		return
	}
	defer cli.Close()
	d.landlock(cli.DaemonHost())
	d.agentTransport(cli.DaemonHost(), o.transport, o.socketDir)
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		d.fail(hint, "Docker engine at %s: %v", cli.DaemonHost(), err)
		d.skip("images: not checked without a Docker engine")
		return
	}
	info, err := cli.Info(ctx)
	if err != nil {
		d.fail(hint, "Docker engine at %s: info: %v", cli.DaemonHost(), err)
		return
	}
	d.ok("Docker engine %s at %s (API %s)", info.ServerVersion, cli.DaemonHost(), cli.ClientVersion())
	d.volumeFS(cli.DaemonHost(), info.DockerRootDir)
	for _, img := range images {
		_, err := cli.ImageInspect(ctx, img)
		switch {
		case err == nil:
			d.ok("image %s present", img)
		case cerrdefs.IsNotFound(err):
			d.fail("run `make images` (or `docker pull "+img+"`)", "image %s missing", img)
		default:
			d.fail("", "image %s: %v", img, err)
		}
	}
}

// volumeFS says whether the workspace volumes sit on a file system that creates
// files fast after deletes (see docker.CheckVolumeFS), when the engine is local.
func (d *doctor) volumeFS(dockerHost, root string) {
	if !strings.HasPrefix(dockerHost, "unix://") {
		d.skip("workspace volumes' file system: the Docker engine at %s is remote, not checked here", dockerHost)
		return
	}
	dir := filepath.Join(root, "volumes")
	switch state, w := docker.CheckVolumeFS(root); state {
	case docker.VolumeFSSlow:
		d.warn(docker.VolumeFSHint(dir), "%s", strings.SplitN(w, "; ", 2)[0])
	case docker.VolumeFSFine:
		d.ok("workspace volumes' file system (%s): not ext4 without a journal, creating files stays fast after deletes", dir)
	default:
		d.skip("workspace volumes' file system (%s): can't be told from here", dir)
	}
}

// landlock reports whether this kernel can enforce allowedCommands (the agent's
// launcher restricts commands with Landlock). Sandboxes run on the Docker engine's
// kernel: that is this one only when the engine is local.
func (d *doctor) landlock(dockerHost string) {
	if !strings.HasPrefix(dockerHost, "unix://") {
		d.skip("Landlock: the Docker engine at %s is remote, its kernel is not checked here (the agent logs it at start; cws-agent ping reports it)", dockerHost)
		return
	}
	if abi := launch.ABI(); abi > 0 {
		d.ok("Landlock ABI %d: the kernel enforces allowedCommands on every command and what it starts", abi)
		return
	}
	d.warn("use a kernel with Landlock (5.13+, \"landlock\" in the lsm= boot list); tenants with \"requireLandlock\": true get their commands refused meanwhile",
		"Landlock unavailable: commands run without kernel enforcement of allowedCommands (counted in cws_exec_unenforced_total)")
}

// agentTransport says which path cws serve would take to the agents, as the driver
// decides it (it prepares the socket directory as cws serve would).
func (d *doctor) agentTransport(dockerHost, want, socketDir string) {
	name, why, err := docker.ResolveTransport(want, dockerHost, socketDir)
	switch {
	case err != nil:
		d.fail("use --agent-transport auto (or exec); for the socket path, run cws beside the engine with --agent-socket-dir writable by cws",
			"agent transport %s: %v", want, err)
	case name == docker.TransportExec && want != docker.TransportExec && strings.HasPrefix(dockerHost, "unix://"):
		d.warn(fmt.Sprintf("create it owned by cws's uid (install -d -m 0700 -o %d %s); when cws runs in a container, mount it at the same path (docker-compose.yml and the Helm chart do)", os.Geteuid(), socketDir),
			"agent transport: exec (every call crosses dockerd, the shim and a bridge): %s", why)
	default:
		d.ok("agent transport: %s: %s", name, why)
	}
	if name != docker.TransportSocket {
		return
	}
	if err := server.LocalReadsAvailable(); err != nil {
		d.skip("local reads: off, readFile and stat go to the agents (%v); run cws as root for reads that skip the agent", err)
		return
	}
	d.ok("local reads: readFile and stat are answered in cws through each workspace's root, as its uid:gid (--local-reads)")
}

func (d *doctor) agent(path string) {
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			d.fail("pass --agent-binary", "agent binary: cannot locate cws itself: %v", err)
			return
		}
		path = filepath.Join(filepath.Dir(exe), "cws-agent")
	}
	st, err := os.Stat(path)
	const hint = "run `make build` (it puts cws-agent next to cws), or pass --agent-binary"
	switch {
	case errors.Is(err, fs.ErrNotExist):
		d.fail(hint, "agent binary %s missing", path)
	case err != nil:
		d.fail(hint, "agent binary %s: %v", path, err)
	case !st.Mode().IsRegular() || st.Mode()&0o111 == 0:
		d.fail("rebuild it with `make build`", "agent binary %s is not an executable file", path)
	default:
		d.ok("agent binary %s (%s)", path, humanBytes(st.Size()))
	}
}

func (d *doctor) redis(ctx context.Context, url string) {
	if url == "" {
		d.skip("Redis: no --redis-url (cws serve would use the embedded in-memory store)")
		return
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		d.fail("use a URL such as redis://localhost:6379/0", "Redis URL %s: %v", redactURL(url), err)
		return
	}
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		d.fail("start Redis (`docker compose up -d redis`), or drop --redis-url to use the embedded store", "Redis at %s: %v", redactURL(url), err)
		return
	}
	d.ok("Redis at %s answers", redactURL(url))
}

func (d *doctor) tenants(path string) {
	if path == "" {
		d.skip("tenants: no --tenants (cws serve would need --dev)")
		return
	}
	ts, err := auth.LoadTenants(path)
	if err != nil {
		d.fail("fix the tenants file (see README: Configuration)", "tenants file %s:\n      %s", path, strings.ReplaceAll(err.Error(), "\n", "\n      "))
		return
	}
	list := ts.List()
	d.ok("tenants file %s: %d tenant(s)", path, len(list))
	for _, t := range list {
		if t.PolicyFile == "" {
			d.ok("tenant %s: default policy", t.ID)
			continue
		}
		data, err := os.ReadFile(t.PolicyFile)
		if err == nil {
			_, err = policy.Parse(data)
		}
		if err != nil {
			d.fail("fix "+t.PolicyFile+" (see README: Policy); cws serve refuses to start until it parses",
				"tenant %s: policy %s: %v", t.ID, t.PolicyFile, err)
			continue
		}
		d.ok("tenant %s: policy %s", t.ID, t.PolicyFile)
	}
}

func (d *doctor) server(ctx context.Context, base string) {
	base = strings.TrimRight(base, "/")
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		d.fail("pass --server as a URL such as "+defaultServer, "cws server %s: %v", base, err)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.skip("cws at %s: not answering (start it with `cws serve --dev`)", base)
		return
	}
	defer resp.Body.Close()
	var body struct{ Status, Reason string }
	_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body)
	if resp.StatusCode != http.StatusOK {
		detail := body.Status
		if body.Reason != "" {
			detail += ": " + body.Reason
		}
		if detail == "" {
			detail = resp.Status
		}
		d.fail("the checks above say what it is missing; its log says more", "cws at %s not ready (%s)", base, detail)
		return
	}
	d.ok("cws at %s ready", base)
}
