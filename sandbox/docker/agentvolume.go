package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"

	"github.com/cwsdev/cws/sandbox"
)

// ensureAgentVolume makes sure the agent volume exists and holds this driver's agent
// binary. It does the work once per Driver; concurrent callers wait for the first, and
// later ones return at once.
//
// The volume is filled through a throwaway container of image (the session's image, so
// no other image is needed): created, never started, with the volume mounted rw at
// /.cws, and CopyToContainer writes the binary into the volume. Docker permits the copy
// although the container's rootfs is read-only, because the destination is a volume.
//
// Two cws replicas may race on a fresh volume; they write identical bytes. The only
// window is a session started by one replica while the other rewrites the file.
func (d *Driver) ensureAgentVolume(ctx context.Context, image string) error {
	if d.agentReady.Load() {
		return nil
	}
	select {
	case d.agentSem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("agent volume %s: %w", d.agentVolume, ctx.Err())
	}
	defer func() { <-d.agentSem }()
	if d.agentReady.Load() {
		return nil
	}
	if err := d.fillAgentVolume(ctx, image); err != nil {
		return fmt.Errorf("agent volume %s: %w", d.agentVolume, err)
	}
	d.agentReady.Store(true)
	return nil
}

// startContainer starts container id (made from image), which mounts the agent volume.
// The volume can vanish behind cws's back once no container uses it: `docker volume
// prune`, or another cws build's PruneAgentVolumes while this one's sessions are all
// suspended or archived. The engine then makes an empty volume of that name at create,
// and the start fails on the missing agent binary. startContainer then fills the
// volume again (ensureAgentVolume checks, it no longer trusts its memory) and starts
// once more, so the caller never sees it.
func (d *Driver) startContainer(ctx context.Context, id, image string) error {
	err := d.cli.ContainerStart(ctx, id, container.StartOptions{})
	if err == nil || !strings.Contains(err.Error(), agentPath) {
		return err
	}
	d.log.Warn("agent volume lost its binary; filling it again", "volume", d.agentVolume, "container", id, "err", err)
	d.agentReady.Store(false)
	if ferr := d.ensureAgentVolume(ctx, image); ferr != nil {
		return fmt.Errorf("%w (and filling the agent volume again failed: %v)", err, ferr)
	}
	return d.cli.ContainerStart(ctx, id, container.StartOptions{})
}

func (d *Driver) fillAgentVolume(ctx context.Context, image string) error {
	suffix := d.agentVolume[len("cws-agent-"):]
	if err := d.labeledAgentVolume(ctx, suffix); err != nil {
		return err
	}

	id, err := d.createFiller(ctx, image, suffix)
	if err != nil {
		return err
	}
	defer func() {
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := d.cli.ContainerRemove(rmCtx, id, container.RemoveOptions{Force: true}); err != nil {
			d.log.Warn("remove agent filler container", "container", id, "err", err)
		}
	}()

	st, err := d.cli.ContainerStatPath(ctx, id, agentPath)
	switch {
	case err == nil && st.Size == d.agentSize && st.Mode.IsRegular() && st.Mode.Perm() == 0o755:
		d.log.Debug("agent volume ready", "volume", d.agentVolume)
		return nil
	case err != nil && !cerrdefs.IsNotFound(err):
		return fmt.Errorf("stat %s: %w", agentPath, err)
	}

	archive, err := d.agentTar()
	if err != nil {
		return err
	}
	if err := d.cli.CopyToContainer(ctx, id, sandbox.AgentDir, bytes.NewReader(archive), container.CopyToContainerOptions{}); err != nil {
		return fmt.Errorf("copy agent into volume: %w", err)
	}
	d.log.Info("agent volume filled", "volume", d.agentVolume, "image", image, "bytes", d.agentSize)
	return nil
}

// labeledAgentVolume creates the agent volume with its labels, or finds it. VolumeCreate
// returns an existing volume as it is, and one the engine made itself has no labels: a
// container created while the volume was gone (pruned behind cws's back, or removed by
// another build's PruneAgentVolumes in a race with a create) makes an empty one of that
// name. Unlabeled, no prune would ever find it again, so it is replaced by a labeled one
// when no container uses it; when one does, it stays as it is until the next fill.
func (d *Driver) labeledAgentVolume(ctx context.Context, suffix string) error {
	labels := map[string]string{sandbox.LabelManaged: "true", sandbox.LabelAgent: suffix}
	v, err := d.cli.VolumeCreate(ctx, volume.CreateOptions{Name: d.agentVolume, Labels: labels})
	if err != nil {
		return fmt.Errorf("create volume: %w", err)
	}
	if v.Labels[sandbox.LabelManaged] == "true" && v.Labels[sandbox.LabelAgent] == suffix {
		return nil
	}
	switch err := d.cli.VolumeRemove(ctx, d.agentVolume, false); {
	case cerrdefs.IsConflict(err):
		d.log.Info("agent volume has no labels (the engine made it); it is relabeled once no container uses it", "volume", d.agentVolume)
		return nil
	case err != nil && !cerrdefs.IsNotFound(err):
		return fmt.Errorf("replace unlabeled volume: %w", err)
	}
	if _, err := d.cli.VolumeCreate(ctx, volume.CreateOptions{Name: d.agentVolume, Labels: labels}); err != nil {
		return fmt.Errorf("create volume: %w", err)
	}
	d.log.Info("agent volume had no labels (the engine made it): made again with them", "volume", d.agentVolume)
	return nil
}

// createFiller creates (never starts) the throwaway container that mounts the agent
// volume read-write. Its entrypoint is only there so images without CMD can be created.
func (d *Driver) createFiller(ctx context.Context, image, suffix string) (string, error) {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := "cws-agent-fill-" + suffix + "-" + hex.EncodeToString(rnd[:])
	cfg := &container.Config{
		Image:      image,
		Entrypoint: []string{agentPath},
		User:       "0:0",
		Labels:     map[string]string{sandbox.LabelAgent: suffix},
	}
	host := &container.HostConfig{
		NetworkMode:    "none",
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: true,
		Mounts: []mount.Mount{{
			Type: mount.TypeVolume, Source: d.agentVolume, Target: sandbox.AgentDir,
			VolumeOptions: &mount.VolumeOptions{NoCopy: true},
		}},
	}
	resp, err := d.cli.ContainerCreate(ctx, cfg, host, nil, nil, name)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", fmt.Errorf("%w: image %q is not on the engine: %v", ErrInvalid, image, err)
		}
		return "", fmt.Errorf("create filler container from %s: %w", image, err)
	}
	return resp.ID, nil
}

// agentTar is a tar of one file, cws-agent (0755, root), read now and checked against
// the hash New took, so a binary replaced on disk is never installed under the old name.
func (d *Driver) agentTar() ([]byte, error) {
	bin, err := os.ReadFile(d.agentPath)
	if err != nil {
		return nil, fmt.Errorf("read agent binary: %w", err)
	}
	if sum := sha256.Sum256(bin); hex.EncodeToString(sum[:]) != d.agentSHA256 {
		return nil, fmt.Errorf("agent binary %s changed on disk since the driver started", d.agentPath)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     "cws-agent",
		Mode:     0o755,
		Size:     int64(len(bin)),
		ModTime:  time.Now(),
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, fmt.Errorf("tar agent: %w", err)
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, fmt.Errorf("tar agent: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("tar agent: %w", err)
	}
	return buf.Bytes(), nil
}
