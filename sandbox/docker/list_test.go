package docker

import (
	"errors"
	"slices"
	"testing"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/version"
)

// TestList creates sandboxes for two tenants and lists them by label.
func TestList(t *testing.T) {
	cli := requireDocker(t)
	requireImage(t, cli, version.TestImage)
	d := newDriver(t)

	tenantA, tenantB := uniq("tenant-a"), uniq("tenant-b")
	specs := []sandbox.Spec{
		{Session: uniq("a1"), Tenant: tenantA, Labels: map[string]string{"role": "x"}},
		{Session: uniq("a2"), Tenant: tenantA},
		{Session: uniq("b1"), Tenant: tenantB, Labels: map[string]string{"role": "x"}},
	}
	for i := range specs {
		specs[i].Image = version.TestImage
		create(t, d, cli, specs[i])
	}
	sessions := func(ss ...sandbox.Spec) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.Session)
		}
		slices.Sort(out)
		return out
	}

	tests := []struct {
		name   string
		labels map[string]string
		want   []string
	}{
		{"tenant a", map[string]string{sandbox.LabelTenant: tenantA}, sessions(specs[0], specs[1])},
		{"tenant b", map[string]string{sandbox.LabelTenant: tenantB}, sessions(specs[2])},
		{"tenant and extra label", map[string]string{sandbox.LabelTenant: tenantA, "role": "x"}, sessions(specs[0])},
		{"one session", map[string]string{sandbox.LabelSession: specs[1].Session}, sessions(specs[1])},
		{"nobody", map[string]string{sandbox.LabelTenant: uniq("nobody")}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			infos, err := d.List(t.Context(), tc.labels)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, in := range infos {
				got = append(got, in.Session)
				if !in.Running || in.Volume != volumeName(in.Session) || in.ID == "" {
					t.Errorf("info = %+v", in)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("List(%v) = %v, want %v", tc.labels, got, tc.want)
			}
		})
	}

	t.Run("create again is ErrExists and harmless", func(t *testing.T) {
		_, err := d.Create(t.Context(), specs[0])
		if !errors.Is(err, ErrExists) {
			t.Fatalf("Create = %v, want ErrExists", err)
		}
		if _, err := cli.VolumeInspect(t.Context(), volumeName(specs[0].Session)); err != nil {
			t.Errorf("volume of the existing sandbox: %v", err)
		}
	})

	t.Run("stop and start", func(t *testing.T) {
		id := containerName(specs[1].Session)
		if err := d.Stop(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		if in, err := d.Inspect(t.Context(), id); err != nil || in.Running {
			t.Fatalf("after Stop: %+v, %v", in, err)
		}
		if err := d.Start(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		if in, err := d.Inspect(t.Context(), id); err != nil || !in.Running {
			t.Fatalf("after Start: %+v, %v", in, err)
		}
	})
}

// TestNotFound checks that every operation on a missing sandbox says ErrNotFound,
// except Remove, which succeeds.
func TestNotFound(t *testing.T) {
	requireDocker(t)
	d := newDriver(t)
	ctx := t.Context()
	id := containerName(uniq("missing"))
	if err := d.Remove(ctx, id); err != nil {
		t.Errorf("Remove = %v, want nil", err)
	}
	checks := map[string]error{
		"Start": d.Start(ctx, id),
		"Stop":  d.Stop(ctx, id),
	}
	_, checks["Inspect"] = d.Inspect(ctx, id)
	_, checks["Attach"] = d.Attach(ctx, id)
	_, _, checks["Exec"] = d.Exec(ctx, id, []string{"true"}, "")
	for op, err := range checks {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s = %v, want ErrNotFound", op, err)
		}
	}
}

// TestCreateFails checks that a failed Create says why and leaves nothing behind.
func TestCreateFails(t *testing.T) {
	cli := requireDocker(t)
	requireImage(t, cli, version.TestImage)
	d := newDriver(t)
	tests := []struct {
		name string
		spec sandbox.Spec
		want error // nil: any error
	}{
		{"missing image", sandbox.Spec{Image: "cws-no-such-image:0"}, ErrInvalid},
		{"bad user", sandbox.Spec{Image: version.TestImage, User: "root"}, ErrInvalid},
		{"engine rejects limits", sandbox.Spec{Image: version.TestImage, Limits: sandbox.Limits{MemoryBytes: 1 << 20}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Session = uniq("fail")
			cleanupSession(t, cli, tc.spec.Session)
			_, err := d.Create(t.Context(), tc.spec)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("Create = %v, want %v", err, tc.want)
			}
			if _, err := cli.ContainerInspect(t.Context(), containerName(tc.spec.Session)); !cerrdefs.IsNotFound(err) {
				t.Errorf("container left behind (err %v)", err)
			}
			if _, err := cli.VolumeInspect(t.Context(), volumeName(tc.spec.Session)); !cerrdefs.IsNotFound(err) {
				t.Errorf("volume left behind (err %v)", err)
			}
		})
	}
}
