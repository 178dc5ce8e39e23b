package docker

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/version"
)

// TestSandbox creates one sandbox per image and checks it end to end: the hardening
// Docker reports, the agent bridge, the slow exec path, privileges after init, and
// that Remove leaves nothing behind.
func TestSandbox(t *testing.T) {
	cli := requireDocker(t)
	// An agent volume of its own, made by this driver: the shared one may be in use by
	// other packages' containers, and left as it was found (agentvolume.go).
	path, _ := privateAgent(t)
	d := newDriverWith(t, Config{AgentBinary: path})
	removeAgentVolumeAtEnd(t, cli, d)
	expires := time.Now().Add(time.Hour)

	tests := []struct {
		name   string
		image  string
		limits sandbox.Limits // given
		want   sandbox.Limits // after defaults
	}{
		{
			name:  "testbox defaults",
			image: version.TestImage,
			want:  packageDefaults,
		},
		{
			name:   "workspace overrides",
			image:  version.WorkspaceImage,
			limits: sandbox.Limits{NanoCPUs: 500_000_000, MemoryBytes: 512 << 20, Pids: 128, NoFile: 1024, FileSizeBytes: 64 << 20, TmpSizeBytes: 32 << 20},
			want:   sandbox.Limits{NanoCPUs: 500_000_000, MemoryBytes: 512 << 20, Pids: 128, NoFile: 1024, FileSizeBytes: 64 << 20, TmpSizeBytes: 32 << 20},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			requireImage(t, cli, tc.image)
			spec := sandbox.Spec{
				Session: uniq("sbx"),
				Tenant:  uniq("tenant"),
				Image:   tc.image,
				Expires: expires,
				Env:     map[string]string{"FOO": "bar", envUIDGID: "0:0"},
				Labels:  map[string]string{"team": "qa", sandbox.LabelManaged: "false"},
				Limits:  tc.limits,
			}
			info := create(t, d, cli, spec)
			if !info.Running || info.Session != spec.Session || info.Volume != volumeName(spec.Session) {
				t.Fatalf("Create info = %+v", info)
			}

			t.Run("hardening", func(t *testing.T) { checkHardening(t, cli, d, info.ID, spec, tc.want) })
			t.Run("inspect", func(t *testing.T) {
				got, err := d.Inspect(t.Context(), containerName(spec.Session))
				if err != nil {
					t.Fatal(err)
				}
				want := info
				want.Expires = expires.UTC().Truncate(time.Second)
				if got != want || !got.Expires.Equal(info.Expires) {
					t.Errorf("Inspect = %+v, want %+v", got, want)
				}
			})
			t.Run("attach ping", func(t *testing.T) { checkPing(t, d, info.ID) })
			t.Run("attach outlives ctx", func(t *testing.T) { checkAttachCtx(t, d, info.ID) })
			t.Run("exec", func(t *testing.T) { checkExec(t, d, info.ID) })
			t.Run("remove", func(t *testing.T) { checkRemove(t, cli, d, info.ID, spec.Session) })
		})
	}
}

func checkHardening(t *testing.T, cli *client.Client, d *Driver, id string, spec sandbox.Spec, want sandbox.Limits) {
	c, err := cli.ContainerInspect(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	hc := c.HostConfig
	if got := c.Name; got != "/"+containerName(spec.Session) {
		t.Errorf("Name = %q", got)
	}
	if !slices.Equal(hc.CapDrop, []string{"ALL"}) {
		t.Errorf("CapDrop = %v", hc.CapDrop)
	}
	var capAdd []string // Docker 20.10 reports them as CAP_*
	for _, c := range hc.CapAdd {
		capAdd = append(capAdd, strings.TrimPrefix(c, "CAP_"))
	}
	if slices.Sort(capAdd); !slices.Equal(capAdd, []string{"CHOWN", "KILL", "SETGID", "SETUID"}) {
		t.Errorf("CapAdd = %v", hc.CapAdd)
	}
	if !slices.Equal(hc.SecurityOpt, []string{"no-new-privileges"}) {
		t.Errorf("SecurityOpt = %v (want no-new-privileges and the default seccomp)", hc.SecurityOpt)
	}
	if hc.Privileged {
		t.Error("Privileged")
	}
	if !hc.ReadonlyRootfs {
		t.Error("ReadonlyRootfs = false")
	}
	if got := hc.Tmpfs["/tmp"]; !strings.Contains(got, "nosuid") || !strings.Contains(got, "nodev") ||
		!strings.HasSuffix(got, "size="+strconv.FormatInt(want.TmpSizeBytes, 10)) {
		t.Errorf("Tmpfs /tmp = %q", got)
	}
	if hc.NetworkMode != "none" {
		t.Errorf("NetworkMode = %q", hc.NetworkMode)
	}
	if hc.Init != nil && *hc.Init {
		t.Error("Init = true; the agent is the init")
	}
	if !hc.RestartPolicy.IsNone() {
		t.Errorf("RestartPolicy = %+v", hc.RestartPolicy)
	}
	r := hc.Resources
	if r.PidsLimit == nil || *r.PidsLimit != want.Pids {
		t.Errorf("PidsLimit = %v, want %d", r.PidsLimit, want.Pids)
	}
	if r.Memory != want.MemoryBytes || r.MemorySwap != want.MemoryBytes {
		t.Errorf("Memory/MemorySwap = %d/%d, want %d", r.Memory, r.MemorySwap, want.MemoryBytes)
	}
	if r.NanoCPUs != want.NanoCPUs {
		t.Errorf("NanoCPUs = %d, want %d", r.NanoCPUs, want.NanoCPUs)
	}
	ulimits := map[string][2]int64{}
	for _, u := range r.Ulimits {
		ulimits[u.Name] = [2]int64{u.Soft, u.Hard}
	}
	if ulimits["nofile"] != [2]int64{want.NoFile, want.NoFile} || ulimits["fsize"] != [2]int64{want.FileSizeBytes, want.FileSizeBytes} {
		t.Errorf("Ulimits = %v", ulimits)
	}

	mounts := map[string]container.MountPoint{}
	for _, m := range c.Mounts {
		mounts[m.Destination] = m
		if strings.Contains(m.Source, "docker.sock") || (m.Type == mount.TypeBind && m.Destination != agent.RunDir) {
			t.Errorf("host mount %+v", m)
		}
	}
	// On the socket path, the one host path is the container's own socket directory.
	wantMounts := 2
	if key := c.Config.Labels[sandbox.LabelSocketDir]; key != "" {
		wantMounts = 3
		if m := mounts[agent.RunDir]; m.Type != mount.TypeBind || m.Source != filepath.Join(d.SocketDir(), key) || !m.RW {
			t.Errorf("%s mount = %+v, want %s/%s", agent.RunDir, m, d.SocketDir(), key)
		}
		if c.Config.Labels[sandbox.LabelSecret] == "" {
			t.Errorf("socket directory but no %s label", sandbox.LabelSecret)
		}
		// The secret never reaches an environment block: any docker exec inherits it.
		if slices.ContainsFunc(c.Config.Env, func(e string) bool { return strings.HasPrefix(e, agent.EnvSecret+"=") }) {
			t.Errorf("%s is in the container's Env", agent.EnvSecret)
		}
	}
	if len(mounts) != wantMounts {
		t.Errorf("mounts = %+v, want /workspace, /.cws (and on the socket path %s) only", c.Mounts, agent.RunDir)
	}
	if m := mounts[sandbox.WorkspaceDir]; m.Type != mount.TypeVolume || m.Name != volumeName(spec.Session) || !m.RW {
		t.Errorf("/workspace mount = %+v", m)
	}
	if m := mounts[sandbox.AgentDir]; m.Type != mount.TypeVolume || m.Name != d.AgentVolume() || m.RW {
		t.Errorf("/.cws mount = %+v, want the agent volume read-only", m)
	}

	cfg := c.Config
	if !slices.Equal(cfg.Entrypoint, []string{"/.cws/cws-agent", "init"}) || len(cfg.Cmd) != 0 {
		t.Errorf("Entrypoint/Cmd = %v/%v", cfg.Entrypoint, cfg.Cmd)
	}
	if cfg.User != "0:0" || cfg.WorkingDir != sandbox.WorkspaceDir {
		t.Errorf("User/WorkingDir = %q/%q", cfg.User, cfg.WorkingDir)
	}
	if !slices.Contains(cfg.Env, "FOO=bar") || !slices.Contains(cfg.Env, envUIDGID+"=1000:1000") || slices.Contains(cfg.Env, envUIDGID+"=0:0") {
		t.Errorf("Env = %v", cfg.Env)
	}
	wantLabels := map[string]string{
		sandbox.LabelManaged: "true",
		sandbox.LabelSession: spec.Session,
		sandbox.LabelTenant:  spec.Tenant,
		sandbox.LabelExpires: spec.Expires.UTC().Format(time.RFC3339),
		"team":               "qa",
	}
	for k, v := range wantLabels {
		if cfg.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cfg.Labels[k], v)
		}
	}
	vol, err := cli.VolumeInspect(t.Context(), volumeName(spec.Session))
	if err != nil {
		t.Fatal(err)
	}
	if vol.Labels[sandbox.LabelManaged] != "true" || vol.Labels[sandbox.LabelSession] != spec.Session {
		t.Errorf("volume labels = %v", vol.Labels)
	}
	av, err := cli.VolumeInspect(t.Context(), d.AgentVolume())
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^cws-agent-`+regexp.QuoteMeta(version.Version)+`-[0-9a-f]{12}$`).MatchString(av.Name) ||
		av.Labels[sandbox.LabelAgent] != strings.TrimPrefix(av.Name, "cws-agent-") {
		t.Errorf("agent volume = %s %v", av.Name, av.Labels)
	}
}

func checkPing(t *testing.T, d *Driver, id string) {
	c := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) {
		return d.Attach(ctx, id)
	}, version.Version, nil)
	defer c.Close()
	// Create does not wait for the agent; retry as the workspace layer does.
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	var (
		res agent.PingResult
		err error
	)
	for {
		if res, err = c.Ping(ctx); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if want, _, _ := parseUser(agent.DefaultAgentUser); res.UID != want || res.Protocol != agent.ProtocolVersion {
		t.Errorf("Ping = %+v", res)
	}
}

// checkAttachCtx: the bridge keeps working after the ctx given to Attach ends, and
// Close ends it.
func checkAttachCtx(t *testing.T, d *Driver, id string) {
	ctx, cancel := context.WithCancel(t.Context())
	rw, err := d.Attach(ctx, id)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	time.Sleep(50 * time.Millisecond)
	if err := agent.WriteHello(rw, agent.Hello{Protocol: agent.ProtocolVersion, Version: "test"}); err != nil {
		t.Fatalf("write hello: %v", err)
	}
	h, err := agent.ReadHello(rw)
	if err != nil || h.Protocol != agent.ProtocolVersion {
		t.Fatalf("read hello = %+v, %v", h, err)
	}
	if err := rw.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := rw.Read(make([]byte, 1)); err == nil {
		t.Error("Read after Close succeeded")
	}
	if err := rw.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func checkExec(t *testing.T, d *Driver, id string) {
	tests := []struct {
		name     string
		argv     []string
		user     string
		wantCode int
		want     *regexp.Regexp // on stdout; nil means anything
	}{
		{"tool uid", []string{"id", "-u"}, "1000:1000", 0, regexp.MustCompile(`^1000\n$`)},
		{"default user is the tool uid", []string{"id", "-u"}, "", 0, regexp.MustCompile(`^1000\n$`)},
		{"init dropped to the agent uid", []string{"cat", "/proc/1/status"}, "0:0", 0, regexp.MustCompile(`(?m)^Uid:\s+65533\s+65533\s+65533\s+65533$`)},
		// KILL, SETGID and SETUID (bits 5-7), and nothing else, never inheritable.
		{"init keeps only its three caps", []string{"cat", "/proc/1/status"}, "0:0", 0, regexp.MustCompile(`(?m)^CapEff:\s+00000000000000e0$`)},
		{"a tool process has no caps", []string{"cat", "/proc/self/status"}, "", 0, regexp.MustCompile(`(?m)^CapEff:\s+0000000000000000\nCapBnd`)},
		{"the tool user cannot read the agent", []string{"cat", "/proc/1/environ"}, "", 1, nil},
		{"init no_new_privs", []string{"cat", "/proc/1/status"}, "", 0, regexp.MustCompile(`(?m)^NoNewPrivs:\s+1$`)},
		{"workspace writable", []string{"touch", "/workspace/.probe"}, "", 0, nil},
		{"tmp writable", []string{"touch", "/tmp/.probe"}, "", 0, nil},
		{"rootfs read-only even for root", []string{"touch", "/etc/.probe"}, "0:0", 1, nil},
		{"agent volume read-only even for root", []string{"touch", "/.cws/.probe"}, "0:0", 1, nil},
		{"no network", []string{"cat", "/proc/net/dev"}, "", 0, regexp.MustCompile(`^(?s:[^\n]*\n[^\n]*\n\s*lo:[^\n]*\n)$`)},
		{"exit code", []string{"sh", "-c", "exit 3"}, "", 3, nil},
	}
	t.Run("ctx ends first", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, _, err := d.Exec(ctx, id, []string{"sleep", "5"}, "")
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 3*time.Second {
			t.Errorf("Exec = %v after %s, want DeadlineExceeded soon", err, time.Since(start))
		}
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, code, err := d.Exec(t.Context(), id, tc.argv, tc.user)
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if code != tc.wantCode {
				t.Errorf("exit code = %d, want %d; stdout %q", code, tc.wantCode, out)
			}
			if tc.want != nil && !tc.want.Match(out) {
				t.Errorf("stdout = %q, want match of %s", out, tc.want)
			}
		})
	}
}

func checkRemove(t *testing.T, cli *client.Client, d *Driver, id, session string) {
	ctx := t.Context()
	if err := d.Remove(ctx, id); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := cli.ContainerInspect(ctx, id); !cerrdefs.IsNotFound(err) {
		t.Errorf("container after Remove: err = %v, want not found", err)
	}
	if _, err := cli.VolumeInspect(ctx, volumeName(session)); !cerrdefs.IsNotFound(err) {
		t.Errorf("volume after Remove: err = %v, want not found", err)
	}
	if err := d.Remove(ctx, id); err != nil {
		t.Errorf("second Remove: %v, want nil", err)
	}
	if _, err := d.Inspect(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Errorf("Inspect after Remove: %v, want ErrNotFound", err)
	}
}
