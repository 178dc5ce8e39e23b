package docker

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"

	"github.com/cwsdev/cws/sandbox"
)

// PruneAgentVolumes removes the agent volumes of other agent builds (every upgrade or
// rebuild of cws-agent makes a new one) that no container uses any more, and returns
// their names. Volumes still mounted by a sandbox are kept until it is removed.
// Another cws replica running a different build recreates its volume on its next
// Create, so pruning is safe across replicas.
func (d *Driver) PruneAgentVolumes(ctx context.Context) ([]string, error) {
	resp, err := d.cli.VolumeList(ctx, volume.ListOptions{
		Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelAgent)),
	})
	if err != nil {
		return nil, fmt.Errorf("prune agent volumes: list: %w", err)
	}
	var removed []string
	for _, v := range resp.Volumes {
		if v.Name == d.agentVolume || v.Labels[sandbox.LabelManaged] != "true" {
			continue
		}
		switch err := d.cli.VolumeRemove(ctx, v.Name, false); {
		case err == nil:
			removed = append(removed, v.Name)
			d.log.Info("agent volume pruned", "volume", v.Name)
		case cerrdefs.IsConflict(err) || cerrdefs.IsNotFound(err):
			// In use by a sandbox, or just removed by another replica.
		default:
			return removed, fmt.Errorf("prune agent volumes: remove %s: %w", v.Name, err)
		}
	}
	return removed, nil
}
