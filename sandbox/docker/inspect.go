package docker

import (
	"context"
	"fmt"
	"strings"

	"github.com/docker/docker/api/types/container"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
)

// Inspect reports one sandbox by container id or name. A missing container, or a
// pooled one not bound to a session, is ErrNotFound.
func (d *Driver) Inspect(ctx context.Context, id string) (sandbox.Info, error) {
	c, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		return sandbox.Info{}, notFound("inspect sandbox", id, err)
	}
	if !managed(c) {
		return sandbox.Info{}, fmt.Errorf("inspect sandbox %s: %w: container is not managed by cws", id, ErrNotFound)
	}
	var binds map[string]map[string]string
	if c.Config.Labels[LabelPool] != "" {
		if binds, err = d.bindings(ctx, map[string]string{LabelBind: c.ID}); err != nil {
			return sandbox.Info{}, fmt.Errorf("inspect sandbox %s: %w", id, err)
		}
	}
	lbl, ok := sessionLabels(c.ID, c.Name, c.Config.Labels, binds)
	if !ok {
		return sandbox.Info{}, fmt.Errorf("inspect sandbox %s: %w: a pooled container bound to no session", id, ErrNotFound)
	}
	running := c.State != nil && c.State.Running
	info := infoFrom(c.ID, lbl, running)
	if v := workspaceVolume(c.Mounts); v != "" {
		info.Volume = v
	}
	return info, nil
}

// managed reports whether a container is one of ours (cws.managed=true).
func managed(c container.InspectResponse) bool {
	return c.Config != nil && c.Config.Labels[sandbox.LabelManaged] == "true"
}

// infoFrom builds an Info from a container's id, labels and state.
func infoFrom(id string, labels map[string]string, running bool) sandbox.Info {
	info := sandbox.InfoFrom(id, labels, running)
	if info.Session != "" {
		info.Volume = volumeName(info.Session)
	}
	return info
}

// workspaceVolume is the name of the volume mounted at /workspace, if any.
func workspaceVolume(mounts []container.MountPoint) string {
	for _, m := range mounts {
		if m.Destination == sandbox.WorkspaceDir && m.Name != "" {
			return m.Name
		}
	}
	return ""
}

// agentUser is the uid:gid the agent of c runs as: its CWS_AGENT_UID_GID, or the tool
// user for a container made by an older cws, whose agent shares the tool uid.
func agentUser(c container.InspectResponse) string {
	if c.Config != nil {
		for _, e := range c.Config.Env {
			if v, ok := strings.CutPrefix(e, agent.EnvAgentUser+"="); ok && sandbox.ValidUser(v) {
				return v
			}
		}
	}
	return toolUser(c)
}

// toolUser is the uid:gid that tool processes run as in a container: its CWS_UID_GID.
func toolUser(c container.InspectResponse) string {
	if c.Config != nil {
		for _, e := range c.Config.Env {
			if v, ok := strings.CutPrefix(e, envUIDGID+"="); ok && sandbox.ValidUser(v) {
				return v
			}
		}
	}
	return DefaultUser
}
