package vscode

import (
	"context"
	"strings"

	"github.com/cwsdev/cws/workspace/tool"
	"github.com/cwsdev/cws/workspace/toolset/core"
)

// The git tools are core's git operations (core.NewCall): the same safety options, and
// denied paths kept out of every listing, diff and history by pathspecs.

func gitTools() []*tool.Tool {
	return []*tool.Tool{
		def("get_project_vcs_status", "VCS status", "The changed files of the project's git repository: pathInProject and type (MODIFICATION, ADDITION, DELETION, MOVED).", tool.Read, getProjectVCSStatus),
		def("find_commit_by_message", "Find commits", "Hashes of the commits whose message contains the text (case-insensitive).", tool.Read, findCommitByMessage),
		def("get_file_history", "File history", "The commits that changed a file, newest first.", tool.Read, getFileHistory),
		def("get_file_diff", "File diff", "The diff of a file between two commits, or between commit1 (default HEAD) and the working tree.", tool.Read, getFileDiff),
		def("get_branch_info", "Branches", "The current branch and the local branches.", tool.Read, getBranchInfo),
		def("get_commit_details", "Commit details", "A commit's hash, message, author, date and changed files.", tool.Read, getCommitDetails),
		def("commit_changes", "Commit", "Commit staged changes with a message; with files, stage and commit just those files. Hooks do not run.", tool.Write, commitChanges),
		def("pull_changes", "Pull", "Pull (fetch and merge) from a remote: a remote name (default origin), a repository path or a bundle file in the workspace, or a URL when the tenant allows egress.", tool.Destructive, pullChanges),
		def("switch_branch", "Switch branch", "Switch to a branch.", tool.Destructive, switchBranch),
		def("create_branch", "Create branch", "Create a branch at HEAD, and switch to it with checkout.", tool.Write, createBranch),
	}
}

type VCSChange struct {
	PathInProject string `json:"pathInProject"`
	Type          string `json:"type" jsonschema:"MODIFICATION, ADDITION, DELETION or MOVED."`
}

func changeType(index, worktree string) string {
	for _, l := range []string{index, worktree} {
		switch l {
		case "A", "?":
			return "ADDITION"
		case "D":
			return "DELETION"
		case "R", "C":
			return "MOVED"
		}
	}
	return "MODIFICATION"
}

func getProjectVCSStatus(ctx context.Context, c *call, _ *NoArgs) (*[]VCSChange, error) {
	st, err := c.core.GitStatus(ctx, &core.GitStatusArgs{})
	if err != nil {
		return nil, err
	}
	c.env.Note(st.Cut())
	out := make([]VCSChange, 0, len(st.Files))
	for _, f := range st.Files {
		out = append(out, VCSChange{PathInProject: f.Path, Type: changeType(f.Index, f.Worktree)})
	}
	return &out, nil
}

type FindCommitArgs struct {
	Text string `json:"text" jsonschema:"The text to search for in commit messages."`
}

func findCommitByMessage(ctx context.Context, c *call, a *FindCommitArgs) (*[]string, error) {
	if a.Text == "" {
		return nil, tool.Invalidf("text", "text must not be empty")
	}
	out, err := c.core.Git(ctx, "log", "--no-color", "--format=%H", "--fixed-strings", "--regexp-ignore-case", "--grep="+a.Text, "--end-of-options", "HEAD", "--")
	if err != nil {
		return nil, err
	}
	hashes := strings.Fields(out)
	if hashes == nil {
		hashes = []string{}
	}
	return &hashes, nil
}

type HistoryArgs struct {
	PathArg
	MaxEntries int `json:"maxEntries,omitempty" jsonschema:"Maximum number of history entries to return. Default 20, at most 1000."`
}

type HistoryEntry struct {
	Hash    string `json:"hash"`
	Message string `json:"message"`
	Author  string `json:"author"`
	Date    string `json:"date" jsonschema:"ISO 8601."`
}

func getFileHistory(ctx context.Context, c *call, a *HistoryArgs) (*[]HistoryEntry, error) {
	r, err := rel(a.PathInProject)
	if err != nil {
		return nil, err
	}
	l, err := c.core.GitLog(ctx, &core.GitLogArgs{Path: r, MaxCount: a.MaxEntries})
	if err != nil {
		return nil, err
	}
	c.env.Note(l.Cut())
	out := make([]HistoryEntry, 0, len(l.Commits))
	for _, ci := range l.Commits {
		out = append(out, HistoryEntry{Hash: ci.Hash, Message: ci.Subject, Author: ci.Author, Date: ci.Date})
	}
	return &out, nil
}

type FileDiffArgs struct {
	PathArg
	Commit1 string `json:"commit1,omitempty" jsonschema:"First commit (or HEAD). Default HEAD."`
	Commit2 string `json:"commit2,omitempty" jsonschema:"Second commit. Default: the working tree."`
}

func getFileDiff(ctx context.Context, c *call, a *FileDiffArgs) (*string, error) {
	r, err := rel(a.PathInProject)
	if err != nil {
		return nil, err
	}
	ref := a.Commit1
	if ref == "" {
		ref = "HEAD"
	}
	if a.Commit2 != "" {
		ref += ".." + a.Commit2
	}
	d, err := c.core.GitDiff(ctx, &core.GitDiffArgs{Ref: ref, Paths: []string{r}})
	if err != nil {
		return nil, err
	}
	c.env.Note(d.Cut())
	return &d.Diff, nil
}

type BranchInfo struct {
	Current  string   `json:"current"`
	Branches []string `json:"branches"`
}

func getBranchInfo(ctx context.Context, c *call, _ *NoArgs) (*BranchInfo, error) {
	b, err := c.core.GitBranch(ctx, &core.GitBranchArgs{})
	if err != nil {
		return nil, err
	}
	return &BranchInfo{Current: b.Current, Branches: b.Branches}, nil
}

type CommitArgs struct {
	CommitHash string `json:"commitHash" jsonschema:"The hash of the commit (or any ref naming one)."`
}

type CommitDetails struct {
	Hash    string   `json:"hash"`
	Message string   `json:"message"`
	Author  string   `json:"author"`
	Date    string   `json:"date" jsonschema:"ISO 8601."`
	Files   []string `json:"files" jsonschema:"The files the commit changed (those the policy lets you read)."`
}

func getCommitDetails(ctx context.Context, c *call, a *CommitArgs) (*CommitDetails, error) {
	if err := core.ValidRef("commitHash", a.CommitHash); err != nil {
		return nil, err
	}
	if strings.Contains(a.CommitHash, "..") {
		return nil, tool.Invalidf("commitHash", "commitHash names one commit, not a range")
	}
	if err := c.core.CommitRange(ctx, "commitHash", a.CommitHash); err != nil {
		return nil, err
	}
	head, err := c.core.Git(ctx, "show", "-s", "--no-color", "--format=%H%x1f%an%x1f%aI%x1f%B", "--end-of-options", a.CommitHash)
	if err != nil {
		return nil, err
	}
	f := strings.SplitN(head, "\x1f", 4)
	if len(f) != 4 {
		return nil, fail("git_failed", "git show %s: unexpected output", a.CommitHash)
	}
	names := []string{"show", "--no-color", "--format=", "--name-only", "-z", "--no-renames", "--end-of-options", a.CommitHash}
	files, err := c.core.GitScoped(ctx, names, names, nil)
	if err != nil {
		return nil, err
	}
	res := &CommitDetails{Hash: f[0], Author: f[1], Date: f[2], Message: strings.TrimSpace(f[3]), Files: []string{}}
	for _, p := range strings.Split(files, "\x00") {
		if p = strings.TrimSpace(p); p != "" {
			res.Files = append(res.Files, p)
		}
	}
	return res, nil
}

type CommitChangesArgs struct {
	Message string   `json:"message" jsonschema:"The commit message."`
	Files   []string `json:"files,omitempty" jsonschema:"Stage and commit just these files. Default: commit what is staged."`
}

type CommitResult struct {
	Success    bool   `json:"success"`
	CommitHash string `json:"commitHash"`
}

func commitChanges(ctx context.Context, c *call, a *CommitChangesArgs) (*CommitResult, error) {
	var r *core.GitCommitResult
	var err error
	if len(a.Files) > 0 {
		r, err = c.core.GitCommitOnly(ctx, a.Message, a.Files)
	} else {
		r, err = c.core.GitCommit(ctx, &core.GitCommitArgs{Message: a.Message})
	}
	if err != nil {
		return nil, err
	}
	return &CommitResult{Success: true, CommitHash: r.Commit}, nil
}

type PullArgs struct {
	Remote string `json:"remote,omitempty" jsonschema:"Remote name, a repository path or bundle file (under /workspace or relative to it), or a URL. Default: origin."`
	Branch string `json:"branch,omitempty" jsonschema:"Branch name. Default: the remote's HEAD (a bundle's or path's) or the upstream."`
}

type PullResult struct {
	Success bool   `json:"success"`
	Message string `json:"message" jsonschema:"Already up to date., or the commits the branch moved between."`
}

// pullSafety turns off the transports that run programs of the remote's choosing.
var pullSafety = []string{"-c", "protocol.ext.allow=never", "-c", "protocol.fd.allow=never", "-c", "merge.ff=true"}

func pullChanges(ctx context.Context, c *call, a *PullArgs) (*PullResult, error) {
	remote := a.Remote
	if remote == "" {
		remote = "origin"
	}
	if strings.HasPrefix(remote, "-") || strings.ContainsAny(remote, "\x00\n") {
		return nil, tool.Invalidf("remote", "%q is not a remote", remote)
	}
	if !strings.Contains(remote, "://") && (strings.Contains(remote, "/") || strings.HasSuffix(remote, ".bundle") || strings.HasPrefix(remote, ".")) {
		r, err := rel(remote) // a repository or bundle in the workspace: readable by policy
		if err != nil {
			return nil, err
		}
		if r, err = c.core.Resolve(r, false, 0); err != nil {
			return nil, err
		}
		remote = "./" + r // git runs in the workspace root; "./" keeps it from being a remote's name
	}
	args := []string{"pull", "--no-edit", "--no-rebase", "--quiet", "--end-of-options", remote}
	if a.Branch != "" {
		if err := core.ValidRef("branch", a.Branch); err != nil {
			return nil, err
		}
		args = append(args, a.Branch)
	}
	before, _ := c.core.Git(ctx, "rev-parse", "-q", "--verify", "HEAD")
	// --quiet: the diffstat would name files, denied ones too.
	if _, err := c.core.Git(ctx, append(append(pullSafety, c.core.GitIdent(ctx)...), args...)...); err != nil {
		return nil, err
	}
	after, _ := c.core.Git(ctx, "rev-parse", "-q", "--verify", "HEAD")
	before, after = strings.TrimSpace(before), strings.TrimSpace(after)
	msg := "Already up to date."
	if before != after {
		msg = "Updated " + short(before) + ".." + short(after)
	}
	return &PullResult{Success: true, Message: msg}, nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	if h == "" {
		return "(none)"
	}
	return h
}

type BranchArgs struct {
	Branch string `json:"branch" jsonschema:"The branch name."`
}

type Switched struct {
	Success bool   `json:"success"`
	Branch  string `json:"branch"`
}

func switchBranch(ctx context.Context, c *call, a *BranchArgs) (*Switched, error) {
	if _, err := c.core.GitCheckout(ctx, &core.GitCheckoutArgs{Ref: a.Branch}); err != nil {
		return nil, err
	}
	return &Switched{Success: true, Branch: a.Branch}, nil
}

type CreateBranchArgs struct {
	BranchArgs
	Checkout bool `json:"checkout,omitempty" jsonschema:"Whether to switch to the new branch after creation. Default false."`
}

type Created struct {
	Success    bool   `json:"success"`
	Branch     string `json:"branch"`
	CheckedOut bool   `json:"checkedOut"`
}

func createBranch(ctx context.Context, c *call, a *CreateBranchArgs) (*Created, error) {
	var err error
	if a.Checkout {
		_, err = c.core.GitCheckout(ctx, &core.GitCheckoutArgs{Ref: a.Branch, Create: true})
	} else {
		_, err = c.core.GitBranch(ctx, &core.GitBranchArgs{Create: a.Branch})
	}
	if err != nil {
		return nil, err
	}
	return &Created{Success: true, Branch: a.Branch, CheckedOut: a.Checkout}, nil
}
