package kube

import (
	"context"
	"fmt"
	"time"
)

// Healing an agent that stopped answering (workspace.Healer).

// reviveTimeout bounds RestartAgent.
const reviveTimeout = 30 * time.Second

// RestartAgent restarts the agent of pod id in place: `cws-agent revive` through the
// exec stream continues every stopped agent process and kills serve, which init
// starts again.
func (d *Driver) RestartAgent(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, reviveTimeout)
	defer cancel()
	p, err := d.get(id)
	if err != nil {
		return fmt.Errorf("restart agent of sandbox %s: %w", id, err)
	}
	if err := ready(p); err != nil {
		return fmt.Errorf("restart agent of sandbox %s: %w", id, err)
	}
	d.pool.DropStream(id)
	out, code, err := d.Exec(ctx, id, []string{agentPath, "revive"})
	if err != nil {
		return fmt.Errorf("restart agent of sandbox %s: %w", id, err)
	}
	if code != 0 {
		return fmt.Errorf("restart agent of sandbox %s: cws-agent revive exited with %d: %s", id, code, out)
	}
	d.log.Info("agent restarted", "pod", id, "revive", string(out))
	return nil
}

// Restart makes pod id again when its agent could not be brought back in place; the
// workspace claim (if any) comes back with it.
func (d *Driver) Restart(ctx context.Context, id string) error {
	d.pool.DropStream(id)
	if _, err := d.get(id); err != nil {
		return fmt.Errorf("restart sandbox %s: %w", id, err)
	}
	return d.recreate(ctx, id, "its agent did not answer")
}
