package core

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent"
)

// gitSafety are the -c options every git call runs with: repository hooks, an fsmonitor
// command, an external diff driver or a signing program (gpg.program, which a commit with
// commit.gpgSign or a log with log.showSignature runs) would run programs the command
// allowlist never saw.
var gitSafety = []string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.quotepath=off", "-c", "color.ui=false",
	"-c", "commit.gpgSign=false", "-c", "tag.gpgSign=false", "-c", "log.showSignature=false"}

// maxGitOutput is the most git output a tool keeps (the agent's per-stream ceiling).
const maxGitOutput = 4<<20 - 8192

// refPattern is what a ref argument may look like: names, ~ ^ @{…} suffixes and ranges,
// never a leading "-" (it would be read as an option).
var refPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_./@{}~^+-]*$`)

func validRef(field, ref string) error {
	if len(ref) > 256 || !refPattern.MatchString(ref) || strings.Contains(ref, "//") {
		return invalidf(field, "%q is not a valid git ref", ref)
	}
	return nil
}

// git runs git in the workspace root and returns stdout, cut at maxGitOutput; a
// non-zero exit is a Failure. The tools whose answer is git's output use gitOut.
func (c *call) git(ctx context.Context, stdin []byte, args ...string) (string, error) {
	out, _, err := c.gitOut(ctx, stdin, args...)
	return out, err
}

// gitOut is git, also saying whether stdout was cut at maxGitOutput.
func (c *call) gitOut(ctx context.Context, stdin []byte, args ...string) (string, bool, error) {
	argv := append(append([]string{"git"}, gitSafety...), args...)
	r, err := c.exec(ctx, agent.ExecArgs{Argv: argv, Env: map[string]string{"GIT_TERMINAL_PROMPT": "0"},
		TimeoutMS: 120_000, OutputCap: maxGitOutput, Guard: c.guard, Launch: c.execPolicy("git")}, stdin, nil)
	if err != nil {
		return "", false, err
	}
	if r.StartError != "" {
		return "", false, &agent.WireError{Code: agent.CodeNotFound, Message: "git is not installed in this workspace image"}
	}
	if r.ExitCode != 0 {
		msg := strings.TrimSpace(string(r.Stderr))
		if msg == "" {
			msg = strings.TrimSpace(string(r.Stdout))
		}
		return "", false, &failure{Code: "git_failed", Message: fmt.Sprintf("git %s: %s", subcommand(args), msg)}
	}
	return string(r.Stdout), r.StdoutTruncated, nil
}

// gitCut says that a git tool's output was cut at maxGitOutput.
const gitCut = "truncated: git printed more than 4 MiB; the rest was left out. Name paths (or a ref, a smaller maxCount) to narrow it."

// wholeRecords drops the last record of out, which cutting it may have split.
func wholeRecords(out, sep string) string {
	if i := strings.LastIndex(out, sep); i >= 0 {
		return out[:i+len(sep)]
	}
	return ""
}

// subcommand is the git command args run, skipping leading -c options.
func subcommand(args []string) string {
	for len(args) > 2 && args[0] == "-c" {
		args = args[2:]
	}
	return args[0]
}

// paths normalizes and read-checks path arguments for git.
func (c *call) paths(root string, ps []string) ([]string, error) {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		rel, err := c.resolve(root, p, false, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, rel)
	}
	return out, nil
}

type GitStatusArgs struct {
	Root
}

type GitFileStatus struct {
	Path     string `json:"path"`
	OrigPath string `json:"origPath,omitempty" jsonschema:"For renames: the old path."`
	Index    string `json:"index" jsonschema:"Staged status letter (M, A, D, R, C, U, ?, or space)."`
	Worktree string `json:"worktree" jsonschema:"Unstaged status letter."`
}

type GitStatusResult struct {
	Branch    string          `json:"branch"`
	Upstream  string          `json:"upstream,omitempty"`
	Ahead     int             `json:"ahead"`
	Behind    int             `json:"behind"`
	Clean     bool            `json:"clean"`
	Files     []GitFileStatus `json:"files"`
	Truncated bool            `json:"truncated,omitempty" jsonschema:"git's output passed 4 MiB: the files after it were left out."`
}

// Cut says that the status was cut ("" when it is whole).
func (r *GitStatusResult) Cut() string { return noteIf(r.Truncated, gitCut) }

var aheadBehind = regexp.MustCompile(`\[(?:ahead (\d+))?(?:, )?(?:behind (\d+))?\]`)

func gitStatus(ctx context.Context, c *call, a *GitStatusArgs) (*GitStatusResult, error) {
	if _, err := c.resolve(a.WorkspaceRoot, ".", false, 0); err != nil {
		return nil, err
	}
	out, cut, err := c.gitOut(ctx, nil, append([]string{"status", "--porcelain=v1", "-z", "--branch", "--untracked-files=all", "--"}, pathspecs(c.guard, nil)...)...)
	if err != nil {
		return nil, err
	}
	if cut { // the last record may be cut short
		out = wholeRecords(out, "\x00")
	}
	res := &GitStatusResult{Files: []GitFileStatus{}, Truncated: cut}
	recs := strings.Split(out, "\x00")
	for i := 0; i < len(recs); i++ {
		r := recs[i]
		if len(r) < 3 {
			continue
		}
		if strings.HasPrefix(r, "## ") {
			head := r[3:]
			if m := aheadBehind.FindStringSubmatch(head); m != nil {
				res.Ahead, _ = strconv.Atoi(m[1])
				res.Behind, _ = strconv.Atoi(m[2])
				head = strings.TrimSpace(head[:strings.Index(head, "[")])
			}
			res.Branch, res.Upstream, _ = strings.Cut(head, "...")
			res.Branch = strings.TrimPrefix(res.Branch, "No commits yet on ")
			continue
		}
		f := GitFileStatus{Index: r[0:1], Worktree: r[1:2], Path: r[3:]}
		if f.Index == "R" || f.Index == "C" {
			i++
			if i < len(recs) {
				f.OrigPath = recs[i]
			}
			if f.OrigPath == "" && cut {
				break // its second record was cut off
			}
		}
		if c.pol.CheckRead(f.Path) != nil || (f.OrigPath != "" && c.pol.CheckRead(f.OrigPath) != nil) {
			continue // the pathspecs left denied paths out; a rename's other side too
		}
		res.Files = append(res.Files, f)
	}
	res.Clean = len(res.Files) == 0
	return res, nil
}

type GitDiffArgs struct {
	Root
	Staged       bool     `json:"staged,omitempty" jsonschema:"Diff the index against HEAD (git diff --cached). Default false: the worktree against the index."`
	Ref          string   `json:"ref,omitempty" jsonschema:"Compare against this commit or range instead (e.g. HEAD~1, main..HEAD)."`
	Paths        []string `json:"paths,omitempty" jsonschema:"Limit the diff to these paths."`
	ContextLines *int     `json:"contextLines,omitempty" jsonschema:"Lines of context (git diff -U). Default 3."`
}

type GitDiffResult struct {
	Diff      string `json:"diff" jsonschema:"Unified diff."`
	Empty     bool   `json:"empty"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"The diff passed 4 MiB: the rest was left out."`
}

// Cut says that the diff was cut ("" when it is whole).
func (r *GitDiffResult) Cut() string { return noteIf(r.Truncated, gitCut) }

func gitDiff(ctx context.Context, c *call, a *GitDiffArgs) (*GitDiffResult, error) {
	args := []string{"diff", "--no-ext-diff", "--no-textconv", "--no-color"}
	if a.Staged {
		args = append(args, "--cached")
	}
	if a.ContextLines != nil {
		if *a.ContextLines < 0 || *a.ContextLines > 1000 {
			return nil, invalidf("contextLines", "contextLines must be between 0 and 1000")
		}
		args = append(args, "-U"+strconv.Itoa(*a.ContextLines))
	}
	var revs []string
	if a.Ref != "" {
		if err := validRef("ref", a.Ref); err != nil {
			return nil, err
		}
		if err := c.commitRange(ctx, "ref", a.Ref); err != nil {
			return nil, err
		}
		revs = []string{a.Ref}
	}
	paths, err := c.paths(a.WorkspaceRoot, a.Paths)
	if err != nil {
		return nil, err
	}
	names := append(append([]string{"diff", "--name-only", "-z", "--no-renames"}, args[4:]...), "--end-of-options")
	out, cut, err := c.gitScopedDiff(ctx, append(names, revs...), append(append(args, "--end-of-options"), revs...), paths)
	if err != nil {
		return nil, err
	}
	return &GitDiffResult{Diff: toText([]byte(out)), Empty: out == "", Truncated: cut}, nil
}

// commitRange checks that every end of a revision or range ("A", "A..B", "A...B") names
// a commit: a raw blob or tree id would make git print a file's contents by its object
// id, past every path rule.
func (c *call) commitRange(ctx context.Context, field, rev string) error {
	ends := []string{rev}
	if a, b, ok := strings.Cut(rev, "..."); ok {
		ends = []string{a, b}
	} else if a, b, ok := strings.Cut(rev, ".."); ok {
		ends = []string{a, b}
	}
	for _, e := range ends {
		if e == "" {
			continue // "A.." is "A..HEAD"
		}
		if _, err := c.git(ctx, nil, "rev-parse", "--verify", "-q", "--end-of-options", e+"^{commit}"); err != nil {
			if f, ok := asFailure(err); ok {
				f.Error.Message = fmt.Sprintf("%s: %q does not name a commit in this repository (blob and tree ids are refused)", field, e)
				return &failure{Code: "git_failed", Message: f.Error.Message}
			}
			return err
		}
	}
	return nil
}

type GitLogArgs struct {
	Root
	Ref      string `json:"ref,omitempty" jsonschema:"Commit or range to start from. Default HEAD."`
	Path     string `json:"path,omitempty" jsonschema:"Only commits touching this path."`
	MaxCount int    `json:"maxCount,omitempty" jsonschema:"Maximum commits. Default 20, at most 1000."`
}

type GitCommitInfo struct {
	Hash    string `json:"hash"`
	Author  string `json:"author"`
	Email   string `json:"email"`
	Date    string `json:"date" jsonschema:"Author date, ISO 8601."`
	Subject string `json:"subject"`
}

type GitLogResult struct {
	Commits   []GitCommitInfo `json:"commits"`
	Count     int             `json:"count"`
	Truncated bool            `json:"truncated,omitempty" jsonschema:"git's output passed 4 MiB: the older commits were left out."`
}

// Cut says that the log was cut ("" when it is whole).
func (r *GitLogResult) Cut() string { return noteIf(r.Truncated, gitCut) }

func gitLog(ctx context.Context, c *call, a *GitLogArgs) (*GitLogResult, error) {
	n := a.MaxCount
	if n <= 0 {
		n = 20
	}
	args := []string{"log", "--no-color", "--format=%H%x1f%an%x1f%ae%x1f%aI%x1f%s%x1e", "-n", strconv.Itoa(min(n, 1000)), "--end-of-options"}
	if a.Ref != "" {
		if err := validRef("ref", a.Ref); err != nil {
			return nil, err
		}
		args = append(args, a.Ref)
	}
	args = append(args, "--")
	if a.Path != "" {
		ps, err := c.paths(a.WorkspaceRoot, []string{a.Path})
		if err != nil {
			return nil, err
		}
		args = append(args, ps...)
	}
	out, cut, err := c.gitOut(ctx, nil, args...)
	if err != nil {
		return nil, err
	}
	if cut {
		out = wholeRecords(out, "\x1e")
	}
	res := &GitLogResult{Commits: []GitCommitInfo{}, Truncated: cut}
	for _, rec := range strings.Split(out, "\x1e") {
		f := strings.Split(strings.TrimSpace(rec), "\x1f")
		if len(f) == 5 {
			res.Commits = append(res.Commits, GitCommitInfo{Hash: f[0], Author: f[1], Email: f[2], Date: f[3], Subject: f[4]})
		}
	}
	res.Count = len(res.Commits)
	return res, nil
}

type GitShowArgs struct {
	Root
	Ref string `json:"ref,omitempty" jsonschema:"Commit to show (default HEAD), or REF:path for a file or directory as it is in that commit."`
}

type GitShowResult struct {
	Ref       string `json:"ref"`
	Output    string `json:"output" jsonschema:"git show: the commit's header, message and patch; for REF:path the file's content (or the directory's entries)."`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"The output passed 4 MiB: the rest was left out."`
}

func gitShow(ctx context.Context, c *call, a *GitShowArgs) (*GitShowResult, error) {
	ref := a.Ref
	if ref == "" {
		ref = "HEAD"
	}
	if rev, file, ok := strings.Cut(ref, ":"); ok {
		return c.showFile(ctx, a.WorkspaceRoot, ref, rev, file)
	}
	if err := validRef("ref", ref); err != nil {
		return nil, err
	}
	if err := c.commitRange(ctx, "ref", ref); err != nil {
		return nil, err
	}
	if strings.Contains(ref, "..") {
		return nil, invalidf("ref", "gitShow shows one commit; for a range use gitLog or gitDiff")
	}
	out, cut, err := c.gitScopedOut(ctx,
		[]string{"show", "--no-color", "--format=", "--name-only", "-z", "--no-renames", "--end-of-options", ref},
		[]string{"show", "--no-ext-diff", "--no-textconv", "--no-color", "--format=fuller", "--end-of-options", ref}, nil, false)
	if err != nil {
		return nil, err
	}
	return &GitShowResult{Ref: ref, Output: toText([]byte(out)), Truncated: cut}, nil
}

// showFile shows REF:path: a file as it is in a commit. The path is checked like a
// readFile path (a denied one is a policy violation), and REF must name a commit, so the
// path is read from the commit's root tree, never from a tree id that would rebase it.
func (c *call) showFile(ctx context.Context, root, ref, rev, file string) (*GitShowResult, error) {
	if err := validRef("ref", rev); err != nil {
		return nil, err
	}
	if strings.Contains(rev, "..") {
		return nil, invalidf("ref", "%q: REF:path takes one commit, not a range", ref)
	}
	if err := c.commitRange(ctx, "ref", rev); err != nil {
		return nil, err
	}
	if strings.HasPrefix(file, "/") || strings.HasPrefix(file, "./") || strings.HasPrefix(file, "../") {
		return nil, invalidf("ref", "in REF:path the path is relative to the repository root, without ./ or /")
	}
	rel, err := c.resolve(root, file, false, 0)
	if err != nil {
		return nil, err
	}
	spec := rev + ":" + rel
	if rel == "." {
		spec = rev + ":"
	}
	out, cut, err := c.gitOut(ctx, nil, "show", "--no-ext-diff", "--no-textconv", "--no-color", "--end-of-options", spec)
	if err != nil {
		return nil, err
	}
	return &GitShowResult{Ref: ref, Output: toText([]byte(out)), Truncated: cut}, nil
}

type GitCommitArgs struct {
	Root
	Message string   `json:"message" jsonschema:"Commit message."`
	Paths   []string `json:"paths,omitempty" jsonschema:"Stage these paths first (git add)."`
	All     bool     `json:"all,omitempty" jsonschema:"Stage every change first, new files included (git add -A)."`
}

type GitCommitResult struct {
	Commit  string `json:"commit" jsonschema:"The new commit's hash."`
	Summary string `json:"summary"`
}

func gitCommit(ctx context.Context, c *call, a *GitCommitArgs) (*GitCommitResult, error) {
	if strings.TrimSpace(a.Message) == "" {
		return nil, invalidf("message", "message must not be empty")
	}
	paths, err := c.paths(a.WorkspaceRoot, a.Paths)
	if err != nil {
		return nil, err
	}
	if a.All { // denied paths are not staged: they stay out of history
		if err := stageAll(ctx, c.gitWhole, pathspecs(c.guard, nil)); err != nil {
			return nil, err
		}
	}
	if len(paths) > 0 {
		if _, err := c.git(ctx, nil, append([]string{"add", "--"}, paths...)...); err != nil {
			return nil, err
		}
	}
	out, err := c.git(ctx, []byte(a.Message), append(c.ident(ctx), "commit", "--no-verify", "-F", "-")...)
	if err != nil {
		return nil, err
	}
	hash, err := c.git(ctx, nil, "rev-parse", "HEAD")
	if err != nil {
		return nil, err
	}
	return &GitCommitResult{Commit: strings.TrimSpace(hash), Summary: strings.TrimSpace(out)}, nil
}

// ident names the committer with -c options when the repository has no user.email.
func (c *call) ident(ctx context.Context) []string {
	if email, _ := c.git(ctx, nil, "config", "user.email"); strings.TrimSpace(email) != "" {
		return []string{}
	}
	return []string{"-c", "user.name=" + c.env.Caller().Subject, "-c", "user.email=" + c.env.Caller().Subject + "@cws.invalid"}
}

type GitBranchArgs struct {
	Root
	Create     string `json:"create,omitempty" jsonschema:"Create a branch with this name."`
	StartPoint string `json:"startPoint,omitempty" jsonschema:"Where a created branch starts. Default HEAD."`
	Delete     string `json:"delete,omitempty" jsonschema:"Delete this (merged) branch."`
}

type GitBranchResult struct {
	Current  string   `json:"current"`
	Branches []string `json:"branches"`
}

func gitBranch(ctx context.Context, c *call, a *GitBranchArgs) (*GitBranchResult, error) {
	switch {
	case a.Create != "":
		if err := validRef("create", a.Create); err != nil {
			return nil, err
		}
		args := []string{"branch", "--end-of-options", a.Create}
		if a.StartPoint != "" {
			if err := validRef("startPoint", a.StartPoint); err != nil {
				return nil, err
			}
			args = append(args, a.StartPoint)
		}
		if _, err := c.git(ctx, nil, args...); err != nil {
			return nil, err
		}
	case a.Delete != "":
		if err := validRef("delete", a.Delete); err != nil {
			return nil, err
		}
		if _, err := c.git(ctx, nil, "branch", "-d", "--end-of-options", a.Delete); err != nil {
			return nil, err
		}
	}
	out, err := c.git(ctx, nil, "for-each-ref", "--format=%(HEAD)%(refname:short)", "refs/heads/")
	if err != nil {
		return nil, err
	}
	res := &GitBranchResult{Branches: []string{}}
	// Each line is %(HEAD) ("*" or " ") then the name: trimming spaces would eat the
	// first branch's marker.
	for _, l := range strings.Split(out, "\n") {
		if len(l) < 2 {
			continue
		}
		name := l[1:]
		if l[0] == '*' {
			res.Current = name
		}
		res.Branches = append(res.Branches, name)
	}
	if res.Current == "" {
		cur, _ := c.git(ctx, nil, "symbolic-ref", "--short", "-q", "HEAD")
		res.Current = strings.TrimSpace(cur)
	}
	return res, nil
}

type GitCheckoutArgs struct {
	Root
	Ref    string `json:"ref" jsonschema:"Branch or commit to check out."`
	Create bool   `json:"create,omitempty" jsonschema:"Create ref as a new branch at HEAD and switch to it."`
}

type GitCheckoutResult struct {
	Ref     string `json:"ref"`
	Message string `json:"message"`
}

func gitCheckout(ctx context.Context, c *call, a *GitCheckoutArgs) (*GitCheckoutResult, error) {
	if err := validRef("ref", a.Ref); err != nil {
		return nil, err
	}
	// validRef refused a leading "-". git checkout (2.39 at least) takes --end-of-options
	// for a second ref ("only one reference expected"), so it is not used here.
	args := []string{"checkout", a.Ref, "--"}
	if a.Create {
		args = []string{"checkout", "-b", a.Ref}
	}
	out, err := c.git(ctx, nil, args...)
	if err != nil {
		return nil, err
	}
	return &GitCheckoutResult{Ref: a.Ref, Message: strings.TrimSpace(out)}, nil
}
