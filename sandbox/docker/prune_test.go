package docker

import (
	"context"
	"slices"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/volume"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/version"
)

func TestPruneAgentVolumes(t *testing.T) {
	cli := requireDocker(t)
	requireImage(t, cli, version.TestImage)
	path, _ := privateAgent(t)
	d := newDriverWith(t, Config{AgentBinary: path})
	removeAgentVolumeAtEnd(t, cli, d)
	stale, inUse, foreign := uniq("cws-agent-old"), uniq("cws-agent-used"), uniq("cws-agent-foreign")
	// Only this test's volumes, its driver's own among them: other packages' tests use
	// their agent volumes meanwhile.
	d.agentPruneLabel = "cws.test=" + stale
	if err := d.ensureAgentVolume(t.Context(), version.TestImage); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{stale, inUse} {
		if _, err := cli.VolumeCreate(t.Context(), volume.CreateOptions{Name: name,
			Labels: map[string]string{sandbox.LabelManaged: "true", sandbox.LabelAgent: name, "cws.test": stale}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.VolumeRemove(context.WithoutCancel(t.Context()), name, true) })
	}
	// Stale too, but not this test's (another package's tests stand in for it).
	if _, err := cli.VolumeCreate(t.Context(), volume.CreateOptions{Name: foreign,
		Labels: map[string]string{sandbox.LabelManaged: "true", sandbox.LabelAgent: foreign}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.VolumeRemove(context.WithoutCancel(t.Context()), foreign, true) })

	withVolume(t, cli, inUse, func(string) {
		removed, err := d.PruneAgentVolumes(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(removed, stale) || slices.Contains(removed, inUse) || slices.Contains(removed, d.AgentVolume()) {
			t.Errorf("removed = %v; want %s, not %s nor the current %s", removed, stale, inUse, d.AgentVolume())
		}
	})
	tests := []struct {
		name string
		gone bool
	}{{stale, true}, {inUse, false}, {d.AgentVolume(), false}, {foreign, false}}
	for _, tc := range tests {
		_, err := cli.VolumeInspect(t.Context(), tc.name)
		if gone := cerrdefs.IsNotFound(err); gone != tc.gone {
			t.Errorf("volume %s: gone = %v (err %v), want %v", tc.name, gone, err, tc.gone)
		}
	}
}
