package docker

import (
	"context"
	"fmt"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"

	"github.com/cwsdev/cws/sandbox"
)

// RemoveOrphanVolumes removes the workspace volumes of this instance's sessions whose
// container is gone: a container removed behind cws's back (`docker rm -f`) leaves its
// volume, which no session can reach again (the session is lost, never recreated).
// Only volumes older than olderThan, of tenants serves says yes to, and used by no
// container (running or not) go; removal is not forced, so a volume the engine still
// counts as in use stays. It returns the names removed.
func (d *Driver) RemoveOrphanVolumes(ctx context.Context, olderThan time.Duration, serves func(tenant string) bool) ([]string, error) {
	cs, err := d.cli.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return nil, fmt.Errorf("orphan volumes: list containers: %w", err)
	}
	used := map[string]bool{}
	for _, c := range cs {
		for _, m := range c.Mounts {
			if m.Name != "" {
				used[m.Name] = true
			}
		}
	}
	resp, err := d.cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", sandbox.LabelManaged+"=true"),
		filters.Arg("label", sandbox.LabelInstance+"="+d.instance),
		filters.Arg("label", sandbox.LabelSession))})
	if err != nil {
		return nil, fmt.Errorf("orphan volumes: list volumes: %w", err)
	}
	var removed []string
	for _, v := range resp.Volumes {
		session := v.Labels[sandbox.LabelSession]
		if used[v.Name] || v.Name != volumeName(session) || strings.HasPrefix(session, "pool-") || !serves(v.Labels[sandbox.LabelTenant]) {
			continue
		}
		created, err := time.Parse(time.RFC3339, v.CreatedAt)
		if err != nil || time.Since(created) < olderThan {
			continue
		}
		switch err := d.cli.VolumeRemove(ctx, v.Name, false); {
		case err == nil:
			removed = append(removed, v.Name)
			d.log.Info("orphan workspace volume removed", "volume", v.Name, "session", session)
		case cerrdefs.IsNotFound(err), cerrdefs.IsConflict(err):
		default:
			d.log.Warn("remove orphan workspace volume", "volume", v.Name, "err", err)
		}
	}
	return removed, nil
}
