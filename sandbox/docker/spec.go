package docker

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
)

// envUIDGID carries the tool uid:gid to the agent's init, which chowns the workspace
// and then drops to it. Attach and Exec read it back from the container.
const envUIDGID = "CWS_UID_GID"

// agentPath is the agent binary inside every container.
const agentPath = sandbox.AgentDir + "/cws-agent"

var packageDefaults = sandbox.Limits{
	NanoCPUs:      DefaultNanoCPUs,
	MemoryBytes:   DefaultMemoryBytes,
	Pids:          DefaultPids,
	NoFile:        DefaultNoFile,
	FileSizeBytes: DefaultFileSize,
	TmpSizeBytes:  DefaultTmpSizeBytes,
}

// containerName and volumeName name a session's container and workspace volume.
func containerName(session string) string { return "cws-" + session }
func volumeName(session string) string    { return "cws-ws-" + session }

// validate rejects specs that Docker would reject less clearly, or that would be unsafe.
func validate(spec sandbox.Spec) error { return sandbox.Validate(spec) }

// labels are the spec's labels with the driver's instance.
func (d *Driver) labels(spec sandbox.Spec) map[string]string {
	return sandbox.Labels(spec, d.instance)
}

// env is spec.Env, sorted, with the agent's uid:gid and CWS_UID_GID last (the spec
// cannot override them, nor set the agent's secret).
func env(spec sandbox.Spec) []string {
	user := spec.User
	if user == "" {
		user = DefaultUser
	}
	out := make([]string, 0, len(spec.Env)+1)
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		if k != envUIDGID && k != agent.EnvSecret && k != agent.EnvAgentUser && k != agent.EnvEgress {
			out = append(out, k+"="+spec.Env[k])
		}
	}
	if !spec.Network {
		// NetworkMode none: the agent's egress proxy is the only way out (agent.EnvEgress).
		out = append(out, agent.EnvEgress+"=proxy")
	}
	return append(out, agent.EnvAgentUser+"="+agent.DefaultAgentUser, envUIDGID+"="+user)
}

// containerConfig is the hardened container for spec. See DESIGN.md, "The sandbox".
// On the socket path (ss.key set) it also mounts the container's socket directory
// (where the agent finds its secret, agent.SecretFile),
// gives the agent its secret, and records the directory in the cws.sockdir label.
func (d *Driver) containerConfig(spec sandbox.Spec, ss socketSetup) (*container.Config, *container.HostConfig) {
	lim := sandbox.WithDefaults(spec.Limits, d.defaults)
	stop := int(d.stopTimeout.Round(time.Second) / time.Second)
	cfg := &container.Config{
		Image: spec.Image,
		// The agent is PID 1: it reaps zombies, so Docker's init stays off. Its init
		// starts as root only to chown the workspace volume, then drops to the tool
		// uid:gid (setgid/setuid) for good; every long-lived process is non-root with
		// no effective capabilities.
		Entrypoint:  []string{agentPath, "init"},
		Cmd:         nil,
		User:        "0:0",
		WorkingDir:  sandbox.WorkspaceDir,
		Env:         env(spec),
		Labels:      d.labels(spec),
		StopTimeout: &stop,
	}
	network := container.NetworkMode("none")
	if spec.Network {
		network = "bridge"
	}
	pids := lim.Pids
	host := &container.HostConfig{
		NetworkMode:   network,
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled}, // cws reconciles
		// Init needs CHOWN (the workspace volume, the agent's own directories) for its
		// first milliseconds as root. It then drops to the agent's own uid keeping
		// SETUID, SETGID (to act as the tool user) and KILL (to signal the tool user's
		// processes), in the agent's permitted and effective sets only (package
		// sandbox/agent/ident). Every tool process runs as the tool uid with no
		// capability at all: exec clears them, no-new-privileges keeps them away.
		CapDrop:        []string{"ALL"},
		CapAdd:         []string{"CHOWN", "SETUID", "SETGID", "KILL"},
		SecurityOpt:    []string{"no-new-privileges"}, // the default seccomp profile stays on
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{"/tmp": fmt.Sprintf("rw,exec,nosuid,nodev,size=%d", lim.TmpSizeBytes)},
		Init:           new(false),
		Resources: container.Resources{
			NanoCPUs:   lim.NanoCPUs,
			Memory:     lim.MemoryBytes,
			MemorySwap: lim.MemoryBytes,
			PidsLimit:  &pids,
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: lim.NoFile, Hard: lim.NoFile},
				{Name: "fsize", Soft: lim.FileSizeBytes, Hard: lim.FileSizeBytes},
			},
		},
		// Never the Docker socket; no host path but the socket directory below.
		Mounts: []mount.Mount{
			{Type: mount.TypeVolume, Source: volumeName(spec.Session), Target: sandbox.WorkspaceDir},
			d.agentMount(true),
		},
	}
	if spec.WorkspaceTmpfsBytes > 0 { // tests only: a workspace that can be filled
		host.Mounts[0] = mount.Mount{Type: mount.TypeTmpfs, Target: sandbox.WorkspaceDir,
			TmpfsOptions: &mount.TmpfsOptions{SizeBytes: spec.WorkspaceTmpfsBytes, Mode: 0o1777}}
	}
	if ss.key != "" {
		// The one host path a sandbox gets: its own socket directory, which holds
		// nothing but the agent's socket (see sockdial.go for how cws dials it).
		host.Mounts = append(host.Mounts, d.socketMount(ss.key))
		cfg.Labels[sandbox.LabelSocketDir] = ss.key
		cfg.Labels[sandbox.LabelSecret] = ss.secret // the agent reads it from its directory
	}
	return cfg, host
}
