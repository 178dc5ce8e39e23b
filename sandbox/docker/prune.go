package docker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
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
	f := filters.NewArgs(filters.Arg("label", sandbox.LabelAgent))
	if d.agentPruneLabel != "" {
		f.Add("label", d.agentPruneLabel)
	}
	resp, err := d.cli.VolumeList(ctx, volume.ListOptions{Filters: f})
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

// socketDirGrace keeps a socket directory that no container names yet: Create makes it
// just before the container.
const socketDirGrace = 10 * time.Minute

// PruneSocketDirs removes the socket directories under the socket dir that no container
// (of any cws instance sharing the directory) names in its cws.sockdir label, once they
// are older than a few minutes, and returns their names. Remove deletes a sandbox's
// own; this catches those of containers removed behind cws's back.
func (d *Driver) PruneSocketDirs(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(d.socketDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("prune socket directories: %w", err)
	}
	cs, err := d.cli.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelSocketDir))})
	if err != nil {
		return nil, fmt.Errorf("prune socket directories: list containers: %w", err)
	}
	used := make(map[string]bool, len(cs))
	for _, c := range cs {
		used[c.Labels[sandbox.LabelSocketDir]] = true
	}
	var removed []string
	for _, e := range entries {
		if !e.IsDir() || !socketKeyRE.MatchString(e.Name()) || used[e.Name()] {
			continue
		}
		if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < socketDirGrace {
			continue
		}
		d.removeSocketDir(e.Name())
		removed = append(removed, e.Name())
		d.log.Info("orphan socket directory pruned", "key", e.Name())
	}
	return removed, nil
}
