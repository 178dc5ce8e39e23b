package core

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"github.com/cwsdev/cws/workspace/policy"
)

// Denied paths never leave the workspace through git. Every git command that prints
// file contents or changes (diff in all its modes, show, log -p, the REST diff) is
// limited where git produces its output, by pathspecs:
//
//  1. the guard's rules become git glob pathspecs: each deniedPaths pattern an exclude
//     (`:(exclude,glob)p` and `p/**`, since a rule about a directory covers its
//     contents), and one allowedPaths set the positive pathspecs;
//  2. git lists the names the command would touch (`--name-only`, no contents), and the
//     agent judges each one with the real guard: the name, its symlink-resolved path and,
//     where anything is denied, a hard link (a denied file's inode under another name).
//     What it refuses is added as `:(exclude,literal)name`, which also covers every
//     difference between doublestar's globs and git's wildmatch, and a second allow set;
//  3. git runs the command with all of them.
//
// The output is never filtered as text. A diff may show that a denied file changed only
// where git itself says so in an allowed path's terms (a rename to an allowed name).

// maxBraceExpansions bounds what one pattern's {a,b} groups may expand to.
const maxBraceExpansions = 256

// pathspecs are the guard's rules as git pathspecs. userPaths, already checked, replace
// the allow set as the positive pathspecs (they are inside it).
func pathspecs(g *guard.Guard, userPaths []string) []string {
	specs := []string{}
	for _, p := range userPaths {
		specs = append(specs, ":(literal)"+p)
	}
	if g == nil {
		return specs
	}
	if len(userPaths) == 0 && len(g.Allow) > 0 {
		set := g.Allow[len(g.Allow)-1] // the others are enforced by the name check
		if len(set) == 0 {
			return []string{":(exclude,glob)**"} // an empty set allows nothing
		}
		for _, p := range set {
			specs = append(specs, globSpecs("glob", p)...)
		}
	}
	for _, p := range g.Deny {
		specs = append(specs, globSpecs("exclude,glob", p)...)
	}
	return specs
}

// globSpecs turns one guard pattern into git glob pathspecs with the given magic: braces
// expanded (git's wildmatch has none), and "p/**" beside "p".
func globSpecs(magic, pattern string) []string {
	if err := guard.ValidPattern(pattern); err != nil {
		return []string{":(" + magic + ")**"} // a bad rule fails closed, as in the guard
	}
	var out []string
	for _, p := range expandBraces(pattern) {
		if p == "." {
			p = "**"
		}
		out = append(out, ":("+magic+")"+p)
		if !strings.HasSuffix(p, "**") {
			out = append(out, ":("+magic+")"+p+"/**")
		}
	}
	return out
}

// expandBraces expands doublestar's {a,b} alternation, innermost last, up to
// maxBraceExpansions results (the rest fall to the name check).
func expandBraces(p string) []string {
	open := -1
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '{':
			open = i
		}
		if open >= 0 {
			break
		}
	}
	if open < 0 {
		return []string{p}
	}
	depth, start := 0, open+1
	var alts []string
	for i := open; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '{':
			depth++
		case ',':
			if depth == 1 {
				alts = append(alts, p[start:i])
				start = i + 1
			}
		case '}':
			if depth--; depth == 0 {
				alts = append(alts, p[start:i])
				var out []string
				for _, a := range alts {
					for _, e := range expandBraces(p[:open] + a + p[i+1:]) {
						if len(out) == maxBraceExpansions {
							return out
						}
						out = append(out, e)
					}
				}
				return out
			}
		}
	}
	return []string{p} // unbalanced: ValidPattern refused it already
}

// gitScoped runs a git command that prints contents or changes with the guard's
// pathspecs. names is the same command listing names only (no contents); out is the
// command itself. Both get "--" and the pathspecs appended.
func (c *call) gitScoped(ctx context.Context, names, out []string, userPaths []string) (string, error) {
	s, _, err := c.gitScopedOut(ctx, names, out, userPaths, false)
	return s, err
}

// gitScopedOut is gitScoped, also saying whether the output was cut at maxGitOutput.
// With emptyIfNone (a diff, which prints nothing for no names) a listing of no names is
// the answer: out does not run.
func (c *call) gitScopedOut(ctx context.Context, names, out []string, userPaths []string, emptyIfNone bool) (string, bool, error) {
	specs, none, err := c.scopeSpecs(ctx, names, userPaths, c.gitWhole)
	if err != nil || (none && emptyIfNone) {
		return "", false, err
	}
	return c.gitOut(ctx, nil, append(append(out, "--"), specs...)...)
}

// gitScopedDiff is gitScopedOut for a diff (diff begins with "diff"), in one git run
// where it can: git prints the names (--raw -z) ahead of the patch, the agent judges
// them, and when it refuses none the patch, made with the guard's pathspecs, is the
// answer as git printed it. Only when the agent refuses some does git run again with
// those excluded, and when the output was cut inside the names the three steps run
// (names is the listing they take). Renames keep both sides in the names (R records
// carry two paths), so nothing leaves that the listing with --no-renames would judge.
func (c *call) gitScopedDiff(ctx context.Context, names, diff []string, userPaths []string) (string, bool, error) {
	specs := pathspecs(c.guard, userPaths)
	if c.guard == nil || refusesNone(c.guard) {
		return c.gitOut(ctx, nil, append(append(diff, "--"), specs...)...)
	}
	combined := append(append([]string{diff[0], "--raw", "-z", "-p"}, diff[1:]...), "--")
	out, cut, err := c.gitOut(ctx, nil, append(combined, specs...)...)
	if err != nil {
		return "", false, err
	}
	listed, patch, whole := splitRaw(out, cut)
	if !whole {
		return c.gitScopedOut(ctx, names, diff, userPaths, true)
	}
	if len(listed) == 0 {
		return "", false, nil
	}
	refused, err := c.refusedSpecs(ctx, listed)
	if err != nil || len(refused) == 0 {
		return patch, cut, err
	}
	return c.gitOut(ctx, nil, append(append(append(diff, "--"), specs...), refused...)...)
}

// splitRaw splits git's `--raw -z -p` output into the names of its raw records (both
// paths of a rename or copy) and the patch that follows them. whole is false when the
// records don't all end before the output does (it was cut inside them).
func splitRaw(out string, cut bool) (names []string, patch string, whole bool) {
	for i := 0; i < len(out); {
		if out[i] == 0 {
			return names, out[i+1:], true
		}
		end := strings.IndexByte(out[i:], 0)
		if out[i] != ':' || end < 0 {
			return nil, "", false
		}
		header := out[i : i+end]
		i += end + 1
		paths := 1
		if st := header[strings.LastIndexByte(header, ' ')+1:]; st != "" && (st[0] == 'R' || st[0] == 'C') {
			paths = 2
		}
		for range paths {
			end := strings.IndexByte(out[i:], 0)
			if end < 0 {
				return nil, "", false
			}
			names = append(names, out[i:i+end])
			i += end + 1
		}
	}
	return names, "", !cut
}

// gitWhole is git refusing output it would have to cut: a list of names that is not
// whole would leave names unjudged.
func (c *call) gitWhole(ctx context.Context, stdin []byte, args ...string) (string, error) {
	out, cut, err := c.gitOut(ctx, stdin, args...)
	if err == nil && cut {
		return "", &policy.Violation{Err: policy.ErrTooLarge, Rule: "gitOutput",
			Detail: fmt.Sprintf("git names more than %d bytes of changed paths: name paths to narrow it", maxGitOutput)}
	}
	return out, err
}

// scopeSpecs returns the pathspecs for a scoped git command: the guard's rules, plus a
// literal exclude for every name git lists that the agent refuses. none says that git
// listed no names; a guard that can refuse no name skips the listing (none is false).
func (c *call) scopeSpecs(ctx context.Context, names []string, userPaths []string,
	git func(ctx context.Context, stdin []byte, args ...string) (string, error)) (specs []string, none bool, err error) {
	specs = pathspecs(c.guard, userPaths)
	if c.guard == nil || refusesNone(c.guard) {
		return specs, false, nil
	}
	listed, err := git(ctx, nil, append(append(names, "--"), specs...)...)
	if err != nil {
		return nil, false, err
	}
	var paths []string
	seen := map[string]bool{}
	for _, p := range strings.Split(listed, "\x00") {
		p = strings.TrimSpace(strings.TrimSuffix(p, "\n"))
		if p != "" && !seen[p] {
			seen[p] = true
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		return specs, true, nil
	}
	refused, err := c.refusedSpecs(ctx, paths)
	if err != nil {
		return nil, false, err
	}
	return append(specs, refused...), false, nil
}

// refusedSpecs has the agent judge paths with the guard, and returns a literal exclude
// pathspec for each one it refuses.
func (c *call) refusedSpecs(ctx context.Context, paths []string) ([]string, error) {
	var specs []string
	for len(paths) > 0 {
		n := checkBatch(paths)
		r, err := c.agent.Check(ctx, agent.CheckArgs{Paths: paths[:n], Guard: c.guard})
		if err != nil {
			return nil, fmt.Errorf("check git paths: %w", err)
		}
		for _, p := range r.Refused {
			specs = append(specs, ":(exclude,literal)"+p)
		}
		paths = paths[n:]
	}
	return specs, nil
}

// refusesNone says that g allows every path by name: it denies nothing and each allow
// set holds "**". The name check would then refuse only a link that leads out of the
// workspace, and git never follows one (it shows a symlink as its target's name), so
// there is nothing for the listing and the check to find. The hard-link rule applies
// only where something is denied.
func refusesNone(g *guard.Guard) bool {
	if len(g.Deny) > 0 {
		return false
	}
	for _, set := range g.Allow {
		if !slices.Contains(set, "**") {
			return false
		}
	}
	return true
}

// checkBytes bounds the paths of one check request, well within a frame's header.
const checkBytes = agent.MaxHeader / 4

// checkBatch is how many of paths (at least one) go in one check request.
func checkBatch(paths []string) int {
	size := 0
	for i, p := range paths {
		// A path is escaped to at most 6 bytes per byte, plus quotes and a comma.
		if size += 6*len(p) + 3; size > checkBytes && i > 0 {
			return i
		}
	}
	return len(paths)
}
