package e2e_test

import (
	"context"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/cwsdev/cws/sandbox"
)

// engine is a raw Docker client for assertions about what is left on the engine.
func engine(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// leftovers lists the managed containers (running or not) and workspace volumes
// (cws-ws-*) that carry all of labels.
func leftovers(t testing.TB, cli *client.Client, labels map[string]string) (containers, volumes []string) {
	t.Helper()
	ctx := context.Background()
	f := filters.NewArgs(filters.Arg("label", sandbox.LabelManaged+"=true"))
	for k, v := range labels {
		f.Add("label", k+"="+v)
	}
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		containers = append(containers, strings.Join(c.Names, ","))
	}
	vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs.Volumes {
		if strings.HasPrefix(v.Name, "cws-ws-") { // not the shared cws-agent-* volume
			volumes = append(volumes, v.Name)
		}
	}
	return containers, volumes
}
