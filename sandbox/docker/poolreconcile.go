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
	"github.com/cwsdev/cws/sandbox/pool"
)

// sweepPool, starting (before the first fill): this owner's unbound pooled containers
// that are healthy (running, of a configured pool and class, with this driver's agent,
// and answering a ping) are taken back into the pool, up to its size; the others are
// removed, as are this owner's half-bound ones (a bind cut short by a crash), bind
// records whose container is gone, and other owners' unbound ones older than twice the
// max age (no owner hands those out any more). A container named for a session whose
// bind record can't be read (unreadableBind) is left, for an operator or the next start.
//
// Afterwards, on every tick of the refill loop: it finishes removals of this owner's
// pooled containers that were cut short, replaces ready ones that stopped, and removes
// bind records whose container is gone, and other owners' too old ones. It leaves this
// owner's other unbound and half-bound containers alone: they may be in the pool, being
// made, or in a bind, right now.
func (d *Driver) sweepPool(ctx context.Context, starting bool) error {
	cs, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", sandbox.LabelManaged+"=true"),
		filters.Arg("label", sandbox.LabelInstance+"="+d.instance),
		filters.Arg("label", LabelPool))})
	if err != nil {
		return fmt.Errorf("list pooled containers: %w", err)
	}
	binds, err := d.bindings(ctx, nil)
	if err != nil {
		return err
	}
	exists := make(map[string]bool, len(cs))
	for _, c := range cs {
		exists[c.ID] = true
		if len(c.Names) == 0 {
			continue
		}
		name := c.Names[0]
		if c.Labels[LabelPoolOwner] != d.pool.Owner() {
			// Another replica's: its own until it is too old for it to hand out.
			if unboundName(name) && time.Since(time.Unix(c.Created, 0)) > 2*d.pool.MaxAge() {
				d.log.Info("removing another owner's old pooled container", "container", c.ID, "owner", c.Labels[LabelPoolOwner])
				if err := d.Remove(ctx, c.ID); err != nil {
					d.log.Warn("remove pooled container", "container", c.ID, "err", err)
				}
			}
			continue
		}
		if _, bound := sessionLabels(c.ID, name, c.Labels, binds); bound && !deletedName(name) {
			continue // a session's
		}
		switch {
		case deletedName(name):
		case !starting && unboundName(name) && c.State != container.StateRunning:
			// A ready one that stopped (an engine restart, an OOM kill): replace it. One
			// not in the ready list, or running by now, is still being made.
			if now, err := d.cli.ContainerInspect(ctx, c.ID); err != nil || now.State == nil || now.State.Running {
				continue
			}
			b, ok := d.pool.Unready(c.ID)
			if !ok {
				continue
			}
			b.Close()
			d.pool.Signal()
		case !starting:
			continue
		case unboundName(name):
			// One with a bind record was in a bind cut short: never hand it out again.
			if _, inBind := binds[c.ID]; !inBind && d.adoptPooled(ctx, c) {
				continue
			}
		case d.unreadableBind(ctx, name):
			// Named for a session whose bind record is there but lost its labels (the
			// engine's volume metadata lost): maybe a session's work. Never removed here.
			d.log.Warn("pooled container bound to a session whose bind record has no labels: left as it is (see the record's volume; `docker rm -f` it once its workspace is saved)",
				"container", c.ID, "name", name, "record", bindName(strings.TrimPrefix(strings.TrimPrefix(name, "/"), "cws-")))
			continue
		}
		d.log.Info("removing pooled container", "container", c.ID, "name", name)
		if err := d.Remove(ctx, c.ID); err != nil {
			d.log.Warn("remove pooled container", "container", c.ID, "err", err)
		}
	}
	if starting {
		d.removeOrphanPoolVolumes(ctx, cs)
	}
	for id, rec := range binds {
		if exists[id] {
			continue
		}
		if _, err := d.cli.ContainerInspect(ctx, id); !cerrdefs.IsNotFound(err) {
			continue // made since the listing, or the engine did not answer
		}
		name := bindName(rec[sandbox.LabelSession])
		if err := d.cli.VolumeRemove(ctx, name, true); err != nil && !cerrdefs.IsNotFound(err) {
			d.log.Warn("remove orphan bind record", "volume", name, "err", err)
		}
	}
	return nil
}

// unreadableBind reports whether container name cws-<session> has a bind record
// cws-bind-<session> that carries no bind label: the engine lists the volume but lost
// what it knew of it (its metadata), so whether the session was bound can't be told.
// A bind cut short by a crash leaves no record at all, or a whole one.
func (d *Driver) unreadableBind(ctx context.Context, name string) bool {
	session, ok := strings.CutPrefix(strings.TrimPrefix(name, "/"), "cws-")
	if !ok {
		return false
	}
	v, err := d.cli.VolumeInspect(ctx, bindName(session))
	if err != nil {
		return !cerrdefs.IsNotFound(err) // the engine did not answer: not now
	}
	return v.Labels[LabelBind] == ""
}

// adoptPooled takes an unbound pooled container left by an earlier run back into the
// pool if it is healthy and the pool has room. It reports whether it did.
func (d *Driver) adoptPooled(ctx context.Context, c container.Summary) bool {
	image := c.Labels[LabelPool]
	made := time.Unix(c.Created, 0)
	if !d.pool.Room(image) || c.State != container.StateRunning || c.Labels[LabelPoolClass] != d.poolClassFor(image).Key() ||
		time.Since(made) >= d.pool.MaxAge() {
		return false
	}
	if agentVolumeOf(c.Mounts) != d.agentVolume {
		return false // an older agent
	}
	ci, err := d.cli.ContainerInspect(ctx, c.ID)
	if err != nil || ci.HostConfig == nil {
		return false
	}
	if err := d.pingAgent(ctx, c.ID); err != nil {
		return false
	}
	r := ci.HostConfig.Resources
	b := pool.Box{ID: c.ID, Volume: workspaceVolume(c.Mounts), Made: made, Stream: d.preopen(ctx, c.ID),
		Limits: sandbox.Limits{NanoCPUs: r.NanoCPUs, MemoryBytes: r.Memory}}
	if r.PidsLimit != nil {
		b.Limits.Pids = *r.PidsLimit
	}
	if !d.pool.Adopt(image, b) {
		b.Close()
		return false
	}
	d.log.Info("pooled container adopted", "container", c.ID, "image", image)
	return true
}

// agentVolumeOf is the name of the volume mounted at the agent directory, if any.
func agentVolumeOf(mounts []container.MountPoint) string {
	for _, m := range mounts {
		if m.Destination == sandbox.AgentDir {
			return m.Name
		}
	}
	return ""
}

// removeOrphanPoolVolumes removes the workspace volumes of pooled containers that are
// gone (a fill or a removal cut short). It runs only at start, when no fill is making
// a volume whose container does not exist yet.
func (d *Driver) removeOrphanPoolVolumes(ctx context.Context, cs []container.Summary) {
	used := map[string]bool{}
	for _, c := range cs {
		used[workspaceVolume(c.Mounts)] = true
	}
	resp, err := d.cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", LabelPool), filters.Arg("label", sandbox.LabelInstance+"="+d.instance))})
	if err != nil {
		d.log.Warn("list pool volumes", "err", err)
		return
	}
	for _, v := range resp.Volumes {
		if used[v.Name] || !strings.HasPrefix(v.Name, volumeName("pool-")) {
			continue
		}
		// Not forced: a volume some container still uses is left alone.
		if err := d.cli.VolumeRemove(ctx, v.Name, false); err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
			d.log.Warn("remove orphan pool volume", "volume", v.Name, "err", err)
		}
	}
}
