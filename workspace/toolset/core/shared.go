package core

import (
	"context"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent"
)

// The operations below are core's, exported on the call NewCall returns so that another
// toolset (vscode) runs the very same code, with the same policy checks and the same
// scoped git, instead of a copy: each takes the core tool's own arguments.

func (c *call) ReadFile(ctx context.Context, a *ReadFileArgs) (*ReadFileResult, error) {
	return readFile(ctx, c, a)
}
func (c *call) WriteFile(ctx context.Context, a *WriteFileArgs) (*WriteFileResult, error) {
	return writeFile(ctx, c, a)
}
func (c *call) ListFiles(ctx context.Context, a *ListFilesArgs) (*ListFilesResult, error) {
	return listFiles(ctx, c, a)
}
func (c *call) SearchFiles(ctx context.Context, a *SearchFilesArgs) (*SearchFilesResult, error) {
	return searchFiles(ctx, c, a)
}
func (c *call) FindFiles(ctx context.Context, a *FindFilesArgs) (*FindFilesResult, error) {
	return findFiles(ctx, c, a)
}
func (c *call) EditFile(ctx context.Context, a *EditFileArgs) (*EditFileResult, error) {
	return editFile(ctx, c, a)
}
func (c *call) GitStatus(ctx context.Context, a *GitStatusArgs) (*GitStatusResult, error) {
	return gitStatus(ctx, c, a)
}
func (c *call) GitDiff(ctx context.Context, a *GitDiffArgs) (*GitDiffResult, error) {
	return gitDiff(ctx, c, a)
}
func (c *call) GitLog(ctx context.Context, a *GitLogArgs) (*GitLogResult, error) {
	return gitLog(ctx, c, a)
}
func (c *call) GitCommit(ctx context.Context, a *GitCommitArgs) (*GitCommitResult, error) {
	return gitCommit(ctx, c, a)
}
func (c *call) GitBranch(ctx context.Context, a *GitBranchArgs) (*GitBranchResult, error) {
	return gitBranch(ctx, c, a)
}
func (c *call) GitCheckout(ctx context.Context, a *GitCheckoutArgs) (*GitCheckoutResult, error) {
	return gitCheckout(ctx, c, a)
}
func (c *call) ListProcesses(ctx context.Context) (*ListProcessesResult, error) {
	return listProcesses(ctx, c, nil)
}

// Resolve normalizes a path argument and checks it like the file tools do (write: the
// write rules for size bytes).
func (c *call) Resolve(p string, write bool, size int64) (string, error) {
	return c.resolve(".", p, write, size)
}

// Wrote tells the service a tool changed the file at rel (the policy file takes effect).
func (c *call) Wrote(rel string) { c.wrote(rel) }

// Git runs git in the workspace root with core's safety options and returns stdout; a
// non-zero exit is a failure result. Only for commands whose output carries no file
// contents or changes: those go through GitScoped.
func (c *call) Git(ctx context.Context, args ...string) (string, error) {
	return c.git(ctx, nil, args...)
}

// GitScoped runs a git command that prints contents or changes, limited by the guard's
// pathspecs (see gitscope.go): names lists the names only, out is the command itself.
func (c *call) GitScoped(ctx context.Context, names, out []string, userPaths []string) (string, error) {
	return c.gitScoped(ctx, names, out, userPaths)
}

// GitPathspecs are the guard's rules as git pathspecs (for status-like listings).
func (c *call) GitPathspecs() []string { return pathspecs(c.guard, nil) }

// ValidRef checks a ref argument (no leading "-", git's ref characters only).
func ValidRef(field, ref string) error { return validRef(field, ref) }

// CommitRange checks that every end of a revision or range names a commit.
func (c *call) CommitRange(ctx context.Context, field, rev string) error {
	return c.commitRange(ctx, field, rev)
}

// ExecPolicy is what a command started for this call may execute (the Landlock
// launcher's policy): allowedCommands plus extraPrograms; nil when nothing is enforced.
func (c *call) ExecPolicy(extraPrograms ...string) *agent.ExecPolicy {
	return c.execPolicy(extraPrograms...)
}

// StartArgv starts argv as a background process exactly as startProcess does (the
// command allowlist, envAllowlist, cwd rules, the launcher); confirmation is the
// pipeline's, by the calling tool's name.
func (c *call) StartArgv(ctx context.Context, argv []string, cwd string, env map[string]string) (*ProcessInfo, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, invalidf("command", "empty command")
	}
	if err := c.pol.CheckCommand(argv[0]); err != nil {
		return nil, err
	}
	if err := c.pol.CheckEnv(env); err != nil {
		return nil, err
	}
	if cwd == "" {
		cwd = "."
	}
	rel, err := c.resolve(".", cwd, false, 0)
	if err != nil {
		return nil, err
	}
	p, err := c.agent.ProcStart(ctx, agent.ProcStartArgs{Argv: argv, Cwd: rel, Env: env, OutputCap: outputCap, Guard: c.guard,
		Launch: c.execPolicy()})
	if err != nil {
		return nil, err
	}
	if p.Unenforced {
		c.env.ExecUnenforced()
	}
	pi := processInfo(p)
	return &pi, nil
}

// CountUnenforced counts a command whose exec policy went unenforced.
func (c *call) CountUnenforced() { c.env.ExecUnenforced() }

// Call is a core call over a tool.Env (NewCall), named for the toolsets that keep one.
type Call = call

// GitCommitOnly stages paths and commits just them (git commit --only), whatever else
// is staged: the vscode toolset's commit_changes with files.
func (c *call) GitCommitOnly(ctx context.Context, message string, paths []string) (*GitCommitResult, error) {
	if strings.TrimSpace(message) == "" {
		return nil, invalidf("message", "message must not be empty")
	}
	rels, err := c.paths(".", paths)
	if err != nil {
		return nil, err
	}
	if len(rels) == 0 {
		return nil, invalidf("files", "no files to commit")
	}
	if _, err := c.git(ctx, nil, append([]string{"add", "--"}, rels...)...); err != nil {
		return nil, err
	}
	out, err := c.git(ctx, []byte(message), append(c.ident(ctx), append([]string{"commit", "--no-verify", "-F", "-", "--only", "--"}, rels...)...)...)
	if err != nil {
		return nil, err
	}
	hash, err := c.git(ctx, nil, "rev-parse", "HEAD")
	if err != nil {
		return nil, err
	}
	return &GitCommitResult{Commit: strings.TrimSpace(hash), Summary: strings.TrimSpace(out)}, nil
}

// GitIdent are the -c options naming the committer when the repository has none
// configured: the caller's subject.
func (c *call) GitIdent(ctx context.Context) []string { return c.ident(ctx) }

// GitWithInput is Git with stdin.
func (c *call) GitWithInput(ctx context.Context, stdin []byte, args ...string) (string, error) {
	return c.git(ctx, stdin, args...)
}
