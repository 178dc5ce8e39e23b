package docker

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/cwsdev/cws/sandbox"
)

// List reports every sandbox container (running or not) that carries cws.managed=true
// and all of the given labels, sorted by session. It is how cws finds what it owns
// after a restart.
func (d *Driver) List(ctx context.Context, labels map[string]string) ([]sandbox.Info, error) {
	f := filters.NewArgs(filters.Arg("label", sandbox.LabelManaged+"=true"), filters.Arg("label", sandbox.LabelInstance+"="+d.instance))
	for k, v := range labels {
		f.Add("label", k+"="+v)
	}
	cs, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	out := make([]sandbox.Info, 0, len(cs))
	for _, c := range cs {
		info := infoFrom(c.ID, c.Labels, c.State == container.StateRunning)
		if v := workspaceVolume(c.Mounts); v != "" {
			info.Volume = v
		}
		info.Deleted = c.State == container.StateRemoving || c.State == container.StateDead || slices.ContainsFunc(c.Names, deletedName)
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b sandbox.Info) int {
		return strings.Compare(a.Session, b.Session)
	})
	return out, nil
}
