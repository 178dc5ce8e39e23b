package docker

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"golang.org/x/sync/errgroup"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/pool"
)

// Binding a pooled container to a session.
//
// A container's labels cannot change after it is made, so a pooled container's
// session lives in two engine-side records that survive the loss of the store:
//   - its name: `docker rename` to cws-<session>, the name a cold container has;
//   - its bind record: a small volume cws-bind-<session> that holds no data and
//     carries the session's cws.* labels (and the spec's own labels), plus
//     cws.bind=<container id>.
//
// List and Inspect report a pooled container only when both agree (the record names
// the container, the container bears the record's session name), with the record's
// labels: exactly the sandbox.Info of a cold container. A pooled container without
// them (unbound, or a bind cut short by a crash) is never reported as a session; the
// pool's reconcile removes the half-bound ones.

// LabelBind, on a bind record, is the id of the container it binds.
const LabelBind = "cws.bind"

// bindName is the name of a session's bind record.
func bindName(session string) string { return "cws-bind-" + session }

// fromPool creates spec's sandbox from a pooled container when one fits (pool.Serve).
func (d *Driver) fromPool(ctx context.Context, spec sandbox.Spec) (sandbox.Info, bool, error) {
	return d.pool.Serve(ctx, spec, d.fits(spec),
		func(ctx context.Context, b pool.Box) (sandbox.Info, error) { return d.bind(ctx, b, spec) }, d.Remove)
}

// bind gives pooled container b to spec's session: its name, its bind record and its
// limits, the three at once (each is one engine round trip). A bind cut short between
// them leaves a container that List does not report (name and record disagree) and
// that the pool's reconcile removes, never hands out again.
func (d *Driver) bind(ctx context.Context, b pool.Box, spec sandbox.Spec) (sandbox.Info, error) {
	var g errgroup.Group
	g.Go(func() error {
		if err := d.cli.ContainerRename(ctx, b.ID, containerName(spec.Session)); err != nil {
			if cerrdefs.IsConflict(err) {
				return fmt.Errorf("bind sandbox %s: %w: %v", spec.Session, ErrExists, err)
			}
			return fmt.Errorf("bind sandbox %s: rename: %w", spec.Session, err)
		}
		return nil
	})
	g.Go(func() error {
		labels := d.labels(spec)
		labels[LabelBind] = b.ID
		// VolumeCreate returns an existing volume as it is: a record it did not make
		// names another container, and the session exists already.
		v, err := d.cli.VolumeCreate(ctx, volume.CreateOptions{Name: bindName(spec.Session), Labels: labels})
		if err != nil {
			return fmt.Errorf("bind sandbox %s: create bind record: %w", spec.Session, err)
		}
		if v.Labels[LabelBind] != b.ID {
			return fmt.Errorf("bind sandbox %s: %w: bind record %s names another container", spec.Session, ErrExists, v.Name)
		}
		return nil
	})
	lim := sandbox.WithDefaults(spec.Limits, d.defaults)
	if lim.NanoCPUs != b.Limits.NanoCPUs || lim.MemoryBytes != b.Limits.MemoryBytes || lim.Pids != b.Limits.Pids {
		g.Go(func() error {
			pids := lim.Pids
			if _, err := d.cli.ContainerUpdate(ctx, b.ID, container.UpdateConfig{Resources: container.Resources{
				NanoCPUs: lim.NanoCPUs, Memory: lim.MemoryBytes, MemorySwap: lim.MemoryBytes, PidsLimit: &pids,
			}}); err != nil {
				return fmt.Errorf("bind sandbox %s: update limits: %w", spec.Session, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return sandbox.Info{}, err
	}
	d.log.Info("sandbox created from the pool", "session", spec.Session, "tenant", spec.Tenant, "image", spec.Image, "container", b.ID)
	info := sandbox.Info{ID: b.ID, Session: spec.Session, Tenant: spec.Tenant, Subject: spec.Subject, Image: spec.Image,
		Running: true, Volume: b.Volume, Default: spec.Default}
	if !spec.Expires.IsZero() {
		info.Expires = spec.Expires.UTC().Truncate(time.Second)
	}
	return info, nil
}

// bindings returns this instance's bind records that carry every label of filter, by
// the id of the container each binds.
func (d *Driver) bindings(ctx context.Context, filter map[string]string) (map[string]map[string]string, error) {
	f := filters.NewArgs(filters.Arg("label", LabelBind), filters.Arg("label", sandbox.LabelInstance+"="+d.instance))
	for k, v := range filter {
		f.Add("label", k+"="+v)
	}
	resp, err := d.cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list bind records: %w", err)
	}
	out := make(map[string]map[string]string, len(resp.Volumes))
	for _, v := range resp.Volumes {
		if id := v.Labels[LabelBind]; id != "" {
			out[id] = v.Labels
		}
	}
	return out, nil
}

// sessionLabels returns the labels a container stands for: its own for a cold one;
// for a pooled one, its bind record's, when the record and the container's name agree.
// ok is false for a pooled container that is not (or not wholly) bound.
func sessionLabels(id, name string, labels map[string]string, binds map[string]map[string]string) (map[string]string, bool) {
	if labels[LabelPool] == "" {
		return labels, true
	}
	rec, ok := binds[id]
	if !ok {
		return nil, false
	}
	name = strings.TrimPrefix(name, "/")
	if name != containerName(rec[sandbox.LabelSession]) && !deletedName(name) {
		return nil, false
	}
	out := maps.Clone(rec)
	delete(out, LabelBind)
	out[LabelPool] = labels[LabelPool]
	return out, true
}

// removeBindings removes the bind records of container id.
func (d *Driver) removeBindings(ctx context.Context, id string) error {
	resp, err := d.cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelBind+"="+id))})
	if err != nil {
		return fmt.Errorf("list bind records: %w", err)
	}
	for _, v := range resp.Volumes {
		if err := d.cli.VolumeRemove(ctx, v.Name, true); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("remove bind record %s: %w", v.Name, err)
		}
	}
	return nil
}

// bindKey reports whether a List filter key is one a pooled container carries only in
// its bind record, so that it must be matched after the join.
func bindKey(k string) bool {
	switch k {
	case sandbox.LabelSession, sandbox.LabelTenant, sandbox.LabelSubject, sandbox.LabelExpires, sandbox.LabelDefault:
		return true
	}
	return !strings.HasPrefix(k, "cws.")
}
