package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/snapshot"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
)

// archSvc is a workspace.Service whose archives go to an S3 store (s3Rig), as the
// archive sections drive it: sessions are archived at once (archiveAfter 1 ns) and
// woken by their next call.
type archSvc struct {
	e      *env
	svc    *workspace.Service
	store  *snapshot.Store
	caller workspace.Caller
	made   []string
}

// newArchSvc makes the service; readyTimeout is its ReadyTimeout (0: the default,
// 60 s), which also bounds a wake (ReadyTimeout + 2 min).
func newArchSvc(e *env, sb workspace.Sandboxes, store *snapshot.Store, image string, log *slog.Logger, readyTimeout time.Duration) *archSvc {
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: memstore.New(), Sandboxes: sb,
		Tenants: policy.ByTenant{auth.DevTenantID: policy.Default()}, DefaultImage: image, LocalReads: e.localReads,
		Snapshots: store, SuspendAfter: time.Hour, ArchiveAfter: time.Nanosecond, Log: log, ReadyTimeout: readyTimeout})
	return &archSvc{e: e, svc: svc, store: store,
		caller: workspace.Caller{Tenant: auth.DevTenantID, Subject: "bench-archive", Scopes: auth.AllScopes()}}
}

// close deletes the sessions made and closes the service.
func (a *archSvc) close(ctx context.Context) {
	a.e.logf("removing %d sessions…", len(a.made))
	for _, id := range a.made {
		_ = a.svc.DeleteSession(context.WithoutCancel(ctx), a.caller, id)
	}
	a.svc.Close()
}

func (a *archSvc) create(ctx context.Context) (string, error) {
	s, err := a.svc.CreateSession(ctx, a.caller, workspace.CreateRequest{})
	if err != nil {
		return "", err
	}
	a.made = append(a.made, s.ID)
	return s.ID, nil
}

// run runs a command in session id through runCommand and checks it exits 0.
func (a *archSvc) run(ctx context.Context, id, command string, args ...string) error {
	b, _ := json.Marshal(map[string]any{"command": command, "args": args})
	res, err := a.svc.Call(ctx, a.caller, id, "runCommand", b, workspace.CallOptions{})
	if err != nil {
		return err
	}
	out, _ := json.Marshal(res.Value)
	if res.IsError || !bytes.Contains(out, []byte(`"exitCode":0`)) {
		return fmt.Errorf("runCommand %s %s: %.400s", command, strings.Join(args, " "), out)
	}
	return nil
}

// read reads path in session id; a wake that outlasts the call's wait (the call
// answers "still waking, retry") is retried until the file comes, as a client would,
// but a wake that failed (the session records why) is an error.
func (a *archSvc) read(ctx context.Context, id, path string) error {
	b, _ := json.Marshal(map[string]string{"path": path})
	start := time.Now()
	for {
		res, err := a.svc.Call(ctx, a.caller, id, "readFile", b, workspace.CallOptions{})
		if errors.Is(err, workspace.ErrUnavailable) && ctx.Err() == nil {
			if s, gerr := a.svc.GetSession(ctx, a.caller, id); gerr == nil && s.WakeErrorAt.After(start) {
				return fmt.Errorf("the wake failed after %s: %s", time.Since(start).Round(time.Second), s.WakeError)
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err == nil && res.IsError {
			err = fmt.Errorf("readFile %s: %v", path, res.Value)
		}
		return err
	}
}

// archive suspends session id and archives it (the reaper, archiveAfter 1 ns; a
// driver whose disks die with their sandbox archives on the suspend already), and
// returns the archive's record.
func (a *archSvc) archive(ctx context.Context, id string) (*snapshot.Snapshot, error) {
	if _, err := a.svc.Suspend(ctx, a.caller, id); err != nil {
		return nil, err
	}
	if _, err := a.svc.Reap(ctx); err != nil {
		return nil, err
	}
	s, err := a.svc.GetSession(ctx, a.caller, id)
	if err != nil {
		return nil, err
	}
	if s.State != workspace.StateArchived || s.Archive == "" {
		return nil, fmt.Errorf("session %s did not archive: it is %s", id, s.State)
	}
	return a.store.Get(ctx, a.caller.Tenant, s.Archive)
}

// sandbox is session id's sandbox (its container on Docker).
func (a *archSvc) sandbox(ctx context.Context, id string) (string, error) {
	s, err := a.svc.GetSession(ctx, a.caller, id)
	if err != nil {
		return "", err
	}
	if s.Sandbox == "" {
		return "", fmt.Errorf("session %s has no sandbox (%s)", id, s.State)
	}
	return s.Sandbox, nil
}

// fill17MB writes the workspace the wake goals are about into session id: 10 MB in
// 1,000 files of random bytes (compression does not flatter), committed to git, so
// about 20 MB / 2,000 files with the .git.
func (a *archSvc) fill17MB(ctx context.Context, id string) error {
	if _, err := a.svc.Upload(ctx, a.caller, id, bytes.NewReader(workspaceTar(1000, 10<<10))); err != nil {
		return err
	}
	if err := a.run(ctx, id, "git", "init", "-q"); err != nil {
		return err
	}
	if err := a.run(ctx, id, "git", "add", "-A"); err != nil {
		return err
	}
	return a.run(ctx, id, "git", "-c", "user.name=bench", "-c", "user.email=bench@cws.invalid", "commit", "-qm", "the files")
}

// timeInBox runs script with sh in container id as user (uid:gid) and returns the
// nanoseconds it prints last (scripts time their own work with date +%s%N, without
// docker exec's cost).
func timeInBox(ctx context.Context, id, user, script string) (time.Duration, error) {
	out, err := exec.CommandContext(ctx, "docker", "exec", "-u", user, id, "sh", "-c", script).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("docker exec %s: %v: %s", script, err, tail(string(out), 10))
	}
	lines := strings.Fields(string(out))
	if len(lines) == 0 {
		return 0, fmt.Errorf("docker exec %s: no time printed", script)
	}
	ns, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("docker exec %s: %q", script, out)
	}
	return time.Duration(ns), nil
}

// The anchors' scripts, in the workspace volume of a session's container (its root
// is read-only and /tmp a small tmpfs): the tree (all of /workspace) into a tar file
// in the same volume, then tar -x of it into a new directory of the volume, timed;
// tar -c of the tree into a pipe, timed. What they add is removed after.
const (
	anchorTar = `set -e; cd /workspace; tar -cf .bench-anchor.tar --exclude=./.bench-x --exclude=./.bench-anchor.tar .; echo 0`
	anchorX   = `set -e; rm -rf /workspace/.bench-x; mkdir /workspace/.bench-x; s=$(date +%s%N); ` +
		`tar -xf /workspace/.bench-anchor.tar -C /workspace/.bench-x; e=$(date +%s%N); rm -rf /workspace/.bench-x; echo $((e - s))`
	anchorC = `set -e; cd /workspace; s=$(date +%s%N); tar -cf - --exclude=./.bench-x --exclude=./.bench-anchor.tar . | cat >/dev/null; ` +
		`e=$(date +%s%N); echo $((e - s))`
	anchorClean = `rm -rf /workspace/.bench-anchor.tar /workspace/.bench-x; echo 0`
)

// workspaceOwner is the uid:gid that owns /workspace in container box: the user
// the anchors run as (root in a sandbox may not write there).
func workspaceOwner(ctx context.Context, box string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", "exec", box, "stat", "-c", "%u:%g", "/workspace").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("docker exec stat /workspace: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// tarX times tar -x of session box's whole tree into its volume, n times.
func tarX(ctx context.Context, box string, n int) ([]time.Duration, error) {
	user, err := workspaceOwner(ctx, box)
	if err != nil {
		return nil, err
	}
	if _, err := timeInBox(ctx, box, user, anchorTar); err != nil {
		return nil, err
	}
	defer func() { _, _ = timeInBox(context.WithoutCancel(ctx), box, user, anchorClean) }()
	var out []time.Duration
	for range n {
		d, err := timeInBox(ctx, box, user, anchorX)
		if err != nil {
			return out, err
		}
		out = append(out, d)
	}
	return out, nil
}

// size words a workspace's size as the rows' notes do: "17.3 MB / 2,051 files".
func size(s *snapshot.Snapshot) string {
	return fmt.Sprintf("%.1f MB / %s files", float64(s.Bytes)/1e6, thousands(int64(s.Files)))
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// budget is the bound on an archive's PUTs (and a wake's GETs) for a
// workspace of b bytes: b / 8 MiB + 10.
func budget(b int64) float64 { return float64(b)/(8<<20) + 10 }

// progressEvery logs what fn says every interval until the returned stop is called.
func progressEvery(e *env, interval time.Duration, fn func() string) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				e.logf("%s", fn())
			}
		}
	}()
	return func() { close(done) }
}
