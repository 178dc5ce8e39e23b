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
// after a restart. A pooled container is reported once it is bound to a session, with
// its bind record's labels (bind.go), and never before.
func (d *Driver) List(ctx context.Context, labels map[string]string) ([]sandbox.Info, error) {
	f := filters.NewArgs(filters.Arg("label", sandbox.LabelManaged+"=true"), filters.Arg("label", sandbox.LabelInstance+"="+d.instance))
	for k, v := range labels {
		if !bindKey(k) {
			f.Add("label", k+"="+v)
		}
	}
	cs, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var binds map[string]map[string]string
	if slices.ContainsFunc(cs, func(c container.Summary) bool { return c.Labels[LabelPool] != "" }) {
		if binds, err = d.bindings(ctx, labels); err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", err)
		}
	}
	out := make([]sandbox.Info, 0, len(cs))
	for _, c := range cs {
		name := ""
		if len(c.Names) > 0 {
			name = c.Names[0]
		}
		lbl, ok := sessionLabels(c.ID, name, c.Labels, binds)
		if !ok || !sandbox.Matches(lbl, labels) {
			continue
		}
		info := infoFrom(c.ID, lbl, c.State == container.StateRunning)
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
