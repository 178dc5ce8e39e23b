package docker

import (
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/version"
)

// A container removed behind cws's back leaves its workspace volume; the sweep removes
// it once it is old enough, and never a volume a container still uses, one too young,
// or one of a tenant this cws does not serve.
func TestRemoveOrphanVolumes(t *testing.T) {
	cli := requireDocker(t)
	requireImage(t, cli, version.TestImage)
	d := newDriver(t)
	tenant, other := uniq("tenant"), uniq("other")
	lost := create(t, d, cli, sandbox.Spec{Session: uniq("lost"), Tenant: tenant, Image: version.TestImage})
	live := create(t, d, cli, sandbox.Spec{Session: uniq("live"), Tenant: tenant, Image: version.TestImage})
	foreign := create(t, d, cli, sandbox.Spec{Session: uniq("foreign"), Tenant: other, Image: version.TestImage})
	for _, id := range []string{lost.ID, foreign.ID} { // docker rm -f: the volume stays
		if err := cli.ContainerRemove(t.Context(), id, container.RemoveOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = cli.VolumeRemove(t.Context(), volumeName(foreign.Session), true)
		_ = cli.VolumeRemove(t.Context(), volumeName(lost.Session), true)
	})
	serves := func(t string) bool { return t == tenant }

	// Too young: kept.
	removed, err := d.RemoveOrphanVolumes(t.Context(), sandbox.OrphanVolumeAge, serves)
	if err != nil || len(removed) != 0 {
		t.Fatalf("young orphans: removed %v, %v; want none", removed, err)
	}
	removed, err = d.RemoveOrphanVolumes(t.Context(), 0, serves)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != volumeName(lost.Session) {
		t.Fatalf("removed %v, want only %s", removed, volumeName(lost.Session))
	}
	if _, err := cli.VolumeInspect(t.Context(), volumeName(lost.Session)); !cerrdefs.IsNotFound(err) {
		t.Errorf("the lost session's volume is still there: %v", err)
	}
	for _, s := range []string{live.Session, foreign.Session} {
		if _, err := cli.VolumeInspect(t.Context(), volumeName(s)); err != nil {
			t.Errorf("volume of %s: %v (it must stay)", s, err)
		}
	}
}
