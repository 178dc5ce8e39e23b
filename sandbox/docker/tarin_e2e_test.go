package docker

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/tartest"
	"github.com/cwsdev/cws/version"
)

// TestTarInE2E runs the archive-upload cases against the agent in a real container,
// through the `docker exec` bridge: every hostile upload is refused with its code and
// leaves /workspace byte for byte as it was; an accepted one merges, and materializes
// hard links as copies.
func TestTarInE2E(t *testing.T) {
	cli := requireDocker(t)
	d := newDriver(t)
	requireImage(t, cli, version.WorkspaceImage)
	info := create(t, d, cli, sandbox.Spec{
		Session: uniq("e2e-tarin"),
		Tenant:  uniq("tenant"),
		Image:   version.WorkspaceImage,
		Limits:  sandbox.Limits{Pids: e2ePids},
	})
	e := &e2eEnv{d: d, id: info.ID}
	e.c = e.client(t)
	e.ping = e.ready(t, e.c)

	ctx := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	hash := func(t *testing.T) string {
		t.Helper()
		var buf bytes.Buffer
		if _, err := e.c.TarOut(ctx(t), agent.TarOutArgs{Path: "."}, &buf); err != nil {
			t.Fatalf("tar out: %v", err)
		}
		h, err := tartest.Hash(&buf)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	ls := func(t *testing.T) string {
		t.Helper()
		res := e.exec(t, agent.ExecArgs{Argv: []string{"ls", "-A", "/workspace"}})
		if res.ExitCode != 0 {
			t.Fatalf("ls: exit %d: %s", res.ExitCode, res.Stderr)
		}
		return string(res.Stdout)
	}

	if _, err := e.c.TarIn(ctx(t), agent.TarInArgs{}, bytes.NewReader(tartest.Fixture())); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	before := hash(t)
	for _, tc := range tartest.Refusals() {
		t.Run(tc.Name, func(t *testing.T) {
			_, err := e.c.TarIn(ctx(t), agent.TarInArgs{Path: ".", MaxBytes: tc.MaxBytes, Guard: tartest.Guard()}, tc.Body())
			var we *agent.WireError
			if !errors.As(err, &we) {
				t.Fatalf("got %v, want a %s refusal", err, tc.Code)
			}
			if we.Code != tc.Code || (tc.Path != "" && we.Path != tc.Path) {
				t.Errorf("got %s %q (%v), want %s %q", we.Code, we.Path, we, tc.Code, tc.Path)
			}
			if hash(t) != before {
				t.Fatal("workspace changed by a refused upload")
			}
			if out := ls(t); strings.Contains(out, ".cws-staging-") || strings.Contains(out, "new.txt") {
				t.Fatalf("after a refused upload /workspace holds:\n%s", out)
			}
		})
	}

	t.Run("accepted upload merges, hard link as a copy", func(t *testing.T) {
		up := tartest.Build(
			tartest.File("src/main.go", "package main // v2\n"),
			tartest.File("bin/run", "#!/bin/sh\necho run\n"),
			tartest.Hardlink("bin/run2", "bin/run"),
		)
		res, err := e.c.TarIn(ctx(t), agent.TarInArgs{Path: ".", Guard: tartest.Guard()}, bytes.NewReader(up))
		if err != nil || res.Files != 3 {
			t.Fatalf("upload: %+v %v", res, err)
		}
		out := e.exec(t, agent.ExecArgs{Argv: []string{"stat", "-c", "%n %h %s", "src/main.go", "src/util.go", "bin/run", "bin/run2"}})
		want := "src/main.go 1 19\nsrc/util.go 1 29\nbin/run 1 19\nbin/run2 1 19\n"
		if out.ExitCode != 0 || string(out.Stdout) != want {
			t.Errorf("stat: exit %d\n%s%s\nwant\n%s", out.ExitCode, out.Stdout, out.Stderr, want)
		}
		if ls := ls(t); strings.Contains(ls, ".cws-staging-") {
			t.Errorf("staging directory left behind:\n%s", ls)
		}
	})
}
