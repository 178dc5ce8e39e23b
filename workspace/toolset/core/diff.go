package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/tool"
)

// emptyTree is git's hash of the empty tree, the base of a repository without commits.
const emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// Diff returns the workspace's changes since its last commit as a git patch, new
// (untracked, not ignored) files included, without touching the repository's index: the
// REST diff (workspace.Config.Diff). Denied paths are left out like in the git tools.
//
// The changes are staged (stageAll) in a private index that starts as the last commit's
// tree.
func Diff(ctx context.Context, env tool.Env) (string, error) {
	c := newCall(env)
	// A private index per call: concurrent diffs never share one, the repository's own is
	// never touched.
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	index := "/tmp/.cws-diff-index-" + hex.EncodeToString(rnd[:])
	defer c.exec(context.WithoutCancel(ctx), agent.ExecArgs{Argv: []string{"rm", "-f", index, index + ".lock"}, TimeoutMS: 10_000}, nil, nil) //nolint:errcheck
	run := func(stdin []byte, args ...string) (string, error) {
		argv := append(append([]string{"git"}, gitSafety...), args...)
		r, err := c.exec(ctx, agent.ExecArgs{Argv: argv, TimeoutMS: 120_000, OutputCap: maxGitOutput,
			Env:    map[string]string{"GIT_INDEX_FILE": index, "GIT_TERMINAL_PROMPT": "0"},
			Launch: c.execPolicy("git")}, stdin, nil)
		if err != nil {
			return "", err
		}
		if r.StartError != "" {
			return "", &policy.Violation{Err: policy.ErrInvalid, Rule: "git", Detail: "git is not installed in this workspace image"}
		}
		if r.ExitCode != 0 {
			return "", &policy.Violation{Err: policy.ErrInvalid, Rule: "git", Detail: "git " + args[0] + ": " + strings.TrimSpace(string(r.Stderr))}
		}
		if r.StdoutTruncated {
			return "", &policy.Violation{Err: policy.ErrTooLarge, Rule: "diff", Detail: "the diff is larger than 4 MiB: download the archive instead"}
		}
		return string(r.Stdout), nil
	}
	if _, err := run(nil, "rev-parse", "--git-dir"); err != nil {
		return "", &policy.Violation{Err: policy.ErrInvalid, Rule: "git", Detail: "the workspace is not a git repository: run git init (and commit a baseline) first"}
	}
	base := "HEAD"
	if _, err := run(nil, "rev-parse", "--verify", "-q", "HEAD"); err != nil {
		base = emptyTree
	}
	if _, err := run(nil, "read-tree", base); err != nil {
		return "", err
	}
	// Denied paths stay out of the index and out of the diff: only names under the
	// guard's pathspecs are staged, and the diff excludes by name every one the agent
	// refuses (a hard link to a denied file, a symlink into one).
	git := func(_ context.Context, stdin []byte, args ...string) (string, error) { return run(stdin, args...) }
	if err := stageAll(ctx, git, pathspecs(c.guard, nil)); err != nil {
		return "", err
	}
	specs, _, err := c.scopeSpecs(ctx, []string{"diff", "--cached", "--name-only", "-z", "--no-renames", base}, nil, git)
	if err != nil {
		return "", err
	}
	return run(nil, append([]string{"diff", "--cached", "--binary", "--no-ext-diff", "--no-textconv", "--no-color", base, "--"}, specs...)...)
}
