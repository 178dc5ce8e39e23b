package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
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
	if agentErr != nil {
		skipOrFail(t, "%v", agentErr)
	}
	// Trailing bytes change the hash, not the executable.
	bin, err := os.ReadFile(agentBinary)
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 16)
	_, _ = rand.Read(junk)
	bin = append(bin, junk...)
	path := filepath.Join(t.TempDir(), "cws-agent")
	if err := os.WriteFile(path, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	newD := func() *Driver {
		d, err := New(Config{AgentBinary: path})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	d := newD()
	t.Cleanup(func() {
		if err := cli.VolumeRemove(context.WithoutCancel(t.Context()), d.AgentVolume(), true); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("remove agent volume: %v", err)
		}
	})

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
