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
// suspended or archived. The engine then makes an empty volume of that name at create
// (with the agent volume's labels: agentMount), and the start fails on the missing
// agent binary. startContainer then fills the volume again (ensureAgentVolume checks,
// it no longer trusts its memory) and starts once more, so the caller never sees it.
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
	if err := d.labeledAgentVolume(ctx); err != nil {
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

// agentLabels are the agent volume's labels, set where it is made: by the fill, and by
// the engine when a container's mount finds the volume gone (agentMount).
func (d *Driver) agentLabels() map[string]string {
	l := map[string]string{sandbox.LabelManaged: "true", sandbox.LabelAgent: d.agentVolume[len("cws-agent-"):]}
	if k, v, ok := strings.Cut(d.agentPruneLabel, "="); ok { // tests
		l[k] = v
	}
	return l
}

// agentMount mounts the agent volume at the agent directory. Should the volume be gone
// when the container is made (`docker volume prune`, or another build's
// PruneAgentVolumes, while no container used it), the engine makes an empty one with
// these labels, which startContainer then fills.
func (d *Driver) agentMount(readOnly bool) mount.Mount {
	return mount.Mount{
		Type: mount.TypeVolume, Source: d.agentVolume, Target: sandbox.AgentDir, ReadOnly: readOnly,
		VolumeOptions: &mount.VolumeOptions{NoCopy: true, Labels: d.agentLabels()},
	}
}

// labeledAgentVolume creates the agent volume with its labels, or finds it. VolumeCreate
// returns an existing volume as it is, so one found without its labels (made by a plain
// `docker run -v`, or left by a Docker whose volume metadata was lost: the engine then
// lists the directory with no labels) is never pruned. It is made again with them when
// no container uses it and it is a plain local volume; otherwise it is left as it is.
func (d *Driver) labeledAgentVolume(ctx context.Context) error {
	labels := d.agentLabels()
	v, err := d.cli.VolumeCreate(ctx, volume.CreateOptions{Name: d.agentVolume, Labels: labels})
	if err != nil {
		return fmt.Errorf("create volume: %w", err)
	}
	if agentLabeled(v.Labels, labels) {
		return nil
	}
	// Options as the engine's metadata holds them: after a loss of it, a local volume
	// made with options (nfs, tmpfs) looks plain here and is made again plain; only
	// the agent's binary is in it, which the fill puts back.
	if v.Driver != "local" || len(v.Options) > 0 {
		d.log.Warn("agent volume has no cws labels and options of its own: left as it is (cws will never prune it)", "volume", d.agentVolume, "driver", v.Driver)
		return nil
	}
	switch err := d.cli.VolumeRemove(ctx, d.agentVolume, false); {
	case cerrdefs.IsConflict(err):
		d.log.Warn("agent volume has no cws labels but is in use: left as it is (a later fill, at the next start, makes it again with them if no container uses it then)", "volume", d.agentVolume)
		return nil
	case err != nil && !cerrdefs.IsNotFound(err):
		return fmt.Errorf("replace the unlabeled volume: %w", err)
	}
	if v, err = d.cli.VolumeCreate(ctx, volume.CreateOptions{Name: d.agentVolume, Labels: labels}); err != nil {
		return fmt.Errorf("create volume: %w", err)
	}
	if !agentLabeled(v.Labels, labels) {
		// A container of another replica made it again in between, without labels (an
		// older cws): the fill below still gives it the binary.
		d.log.Warn("agent volume made again without cws labels in between", "volume", d.agentVolume)
		return nil
	}
	d.log.Info("agent volume had no cws labels: made again with them", "volume", d.agentVolume)
	return nil
}

func agentLabeled(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
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
		Mounts:         []mount.Mount{d.agentMount(false)},
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
