package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/version"
)

// TestAgentVolume fills a fresh agent volume (a variant of the agent binary, so the
// volume is new and private to this test) from a FROM-scratch image, concurrently,
// then checks its content, and that a damaged volume is repaired by the next driver.
func TestAgentVolume(t *testing.T) {
	cli := requireDocker(t)
	requireImage(t, cli, version.TestImage)
	path, bin := privateAgent(t)
	newD := func() *Driver {
		d, err := New(Config{AgentBinary: path})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	d := newD()
	removeAgentVolumeAtEnd(t, cli, d)

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = d.ensureAgentVolume(t.Context(), version.TestImage) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ensureAgentVolume #%d: %v", i, err)
		}
	}
	if got, hdr := readAgent(t, cli, d.AgentVolume()); !bytes.Equal(got, bin) || hdr.Mode&0o777 != 0o755 || hdr.Uid != 0 || hdr.Gid != 0 {
		t.Errorf("agent in volume: %d bytes (want %d), mode %o, owner %d:%d", len(got), len(bin), hdr.Mode, hdr.Uid, hdr.Gid)
	}

	// Damage it (a truncated copy), as an interrupted fill would; a new driver repairs it.
	writeAgent(t, cli, d.AgentVolume(), bin[:100])
	if err := newD().ensureAgentVolume(t.Context(), version.TestImage); err != nil {
		t.Fatal(err)
	}
	if got, _ := readAgent(t, cli, d.AgentVolume()); !bytes.Equal(got, bin) {
		t.Errorf("after repair: %d bytes, want %d", len(got), len(bin))
	}
	if v, err := cli.VolumeInspect(t.Context(), d.AgentVolume()); err != nil || v.Labels[sandbox.LabelManaged] != "true" {
		t.Errorf("agent volume labels: %v, %v", v.Labels, err)
	}
}

// TestAgentVolumeRemovedBehindCWS removes the agent volume once no sandbox uses it (as
// `docker volume prune`, or another cws build's PruneAgentVolumes, may while every
// session of this one is suspended or archived). The driver has filled it before and
// does not look again; the next Create must still give a sandbox whose agent answers.
func TestAgentVolumeRemovedBehindCWS(t *testing.T) {
	cli := requireDocker(t)
	requireImage(t, cli, version.TestImage)
	path, _ := privateAgent(t)
	d := newDriverWith(t, Config{AgentBinary: path})
	removeAgentVolumeAtEnd(t, cli, d)

	create := func() sandbox.Info { t.Helper(); return createPinged(t, cli, d, "s-agentvol") }
	first := create()
	if err := d.Remove(t.Context(), first.ID); err != nil {
		t.Fatal(err)
	}
	if err := cli.VolumeRemove(t.Context(), d.AgentVolume(), false); err != nil {
		t.Fatalf("remove the unused agent volume: %v", err)
	}
	// The create made the engine make the volume again, empty, from the mount (which
	// carries its labels); the start found no agent and the driver filled it.
	create()
	checkAgentLabels(t, cli, d)
}

// TestAgentVolumeUnlabeled starts a driver whose agent volume is there without labels (a
// `docker run -v` made it, or Docker lost its volumes' metadata): its first fill gives
// it its labels back, and its sandboxes' agents answer.
func TestAgentVolumeUnlabeled(t *testing.T) {
	cli := requireDocker(t)
	requireImage(t, cli, version.TestImage)
	path, bin := privateAgent(t)
	d := newDriverWith(t, Config{AgentBinary: path})
	removeAgentVolumeAtEnd(t, cli, d)
	if _, err := cli.VolumeCreate(t.Context(), volume.CreateOptions{Name: d.AgentVolume()}); err != nil {
		t.Fatal(err)
	}
	writeAgent(t, cli, d.AgentVolume(), bin[:10])
	// In use (a container mounts it): left as it is, but filled.
	withVolume(t, cli, d.AgentVolume(), func(string) {
		if err := d.ensureAgentVolume(t.Context(), version.TestImage); err != nil {
			t.Fatalf("ensureAgentVolume, volume in use: %v", err)
		}
	})
	if v, err := cli.VolumeInspect(t.Context(), d.AgentVolume()); err != nil || len(v.Labels) != 0 {
		t.Errorf("an unlabeled volume in use: labels %v (err %v), want it left as it was", v.Labels, err)
	}
	if got, _ := readAgent(t, cli, d.AgentVolume()); !bytes.Equal(got, bin) {
		t.Errorf("agent in the volume in use: %d bytes, want %d", len(got), len(bin))
	}
	d.agentReady.Store(false) // as a new driver: the next Create looks again

	createPinged(t, cli, d, "s-unlabeled")
	checkAgentLabels(t, cli, d)
	if got, _ := readAgent(t, cli, d.AgentVolume()); !bytes.Equal(got, bin) {
		t.Errorf("agent in the relabeled volume: %d bytes, want %d", len(got), len(bin))
	}
}

// createPinged creates a sandbox of the test image for a new session named from prefix
// (removed at the end) and waits until its agent answers.
func createPinged(t *testing.T, cli *client.Client, d *Driver, prefix string) sandbox.Info {
	t.Helper()
	spec := sandbox.Spec{Session: uniq(prefix), Tenant: "t-agentvol", Image: version.TestImage}
	cleanupSession(t, cli, spec.Session)
	info, err := d.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := d.pingAgent(t.Context(), info.ID); err != nil {
		t.Fatalf("agent of %s: %v", info.ID, err)
	}
	return info
}

func checkAgentLabels(t *testing.T, cli *client.Client, d *Driver) {
	t.Helper()
	v, err := cli.VolumeInspect(t.Context(), d.AgentVolume())
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimPrefix(d.AgentVolume(), "cws-agent-"); v.Labels[sandbox.LabelManaged] != "true" || v.Labels[sandbox.LabelAgent] != want {
		t.Errorf("agent volume %s labels = %v, want %s=true %s=%s", v.Name, v.Labels, sandbox.LabelManaged, sandbox.LabelAgent, want)
	}
}

// privateAgent writes a variant of the test agent (trailing bytes change its hash, not
// the executable), so a driver using it has an agent volume of its own.
func privateAgent(t *testing.T) (path string, bin []byte) {
	t.Helper()
	if agentErr != nil {
		skipOrFail(t, "%v", agentErr)
	}
	bin, err := os.ReadFile(agentBinary)
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 16)
	_, _ = rand.Read(junk)
	bin = append(bin, junk...)
	path = filepath.Join(t.TempDir(), "cws-agent")
	if err := os.WriteFile(path, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return path, bin
}

func removeAgentVolumeAtEnd(t *testing.T, cli *client.Client, d *Driver) {
	t.Cleanup(func() {
		if err := cli.VolumeRemove(context.WithoutCancel(t.Context()), d.AgentVolume(), true); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("remove agent volume: %v", err)
		}
	})
}

// withVolume runs f with a created (never started) container that mounts vol at /.cws.
func withVolume(t *testing.T, cli *client.Client, vol string, f func(id string)) {
	t.Helper()
	resp, err := cli.ContainerCreate(t.Context(), &container.Config{Image: version.TestImage, Entrypoint: []string{"/bin/true"}},
		&container.HostConfig{NetworkMode: "none", Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: sandbox.AgentDir}}}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.ContainerRemove(context.WithoutCancel(t.Context()), resp.ID, container.RemoveOptions{Force: true})
	f(resp.ID)
}

func readAgent(t *testing.T, cli *client.Client, vol string) (content []byte, hdr *tar.Header) {
	t.Helper()
	withVolume(t, cli, vol, func(id string) {
		rc, _, err := cli.CopyFromContainer(t.Context(), id, agentPath)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		tr := tar.NewReader(rc)
		if hdr, err = tr.Next(); err != nil {
			t.Fatal(err)
		}
		if content, err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	})
	return content, hdr
}

func writeAgent(t *testing.T, cli *client.Client, vol string, content []byte) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "cws-agent", Mode: 0o755, Size: int64(len(content)), Typeflag: tar.TypeReg})
	_, _ = tw.Write(content)
	_ = tw.Close()
	withVolume(t, cli, vol, func(id string) {
		if err := cli.CopyToContainer(t.Context(), id, sandbox.AgentDir, &buf, container.CopyToContainerOptions{}); err != nil {
			t.Fatal(err)
		}
	})
}
