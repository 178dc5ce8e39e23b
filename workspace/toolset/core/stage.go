package core

import (
	"context"
	"strings"
)

// stageAll is `git add -A -- specs` that no policy's pathspecs make fail: it stages in
// the index (GIT_INDEX_FILE's, or the repository's) every change under specs, tracked
// files changed or deleted and untracked files that are not ignored. git add fails on a
// pathspec that matches nothing (`**/*/**` in a repository of top-level files) and on
// one that names an ignored path (a denied `.env` in .gitignore), both normal here; so
// the names come from commands that take pathspecs and never fail on them (diff-files,
// ls-files), and are staged by name (update-index). A nested repository (ls-files lists
// it as "dir/") is left out. git must refuse output it would cut (gitWhole).
func stageAll(ctx context.Context, git func(ctx context.Context, stdin []byte, args ...string) (string, error), specs []string) error {
	// A fresh index (read-tree) has no stat data: refresh it, so that diff-files lists
	// only the files whose contents changed. -q: a stale entry is not an error.
	if _, err := git(ctx, nil, "update-index", "-q", "--refresh"); err != nil {
		return err
	}
	changed, err := git(ctx, nil, append([]string{"diff-files", "-z", "--name-only", "--no-renames", "--"}, specs...)...)
	if err != nil {
		return err
	}
	untracked, err := git(ctx, nil, append([]string{"ls-files", "-z", "--others", "--exclude-standard", "--"}, specs...)...)
	if err != nil {
		return err
	}
	var names strings.Builder
	for _, n := range strings.Split(changed+untracked, "\x00") {
		if n != "" && !strings.HasSuffix(n, "/") {
			names.WriteString(n + "\x00")
		}
	}
	if names.Len() == 0 {
		return nil
	}
	_, err = git(ctx, []byte(names.String()), "update-index", "-z", "--add", "--remove", "--stdin")
	return err
}
