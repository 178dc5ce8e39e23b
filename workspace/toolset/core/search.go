package core

import (
	"context"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/cwsdev/cws/sandbox/agent"
)

// maxQueryLen bounds a search query (literal or regex), so that compiling it stays cheap.
const maxQueryLen = 4096

type SearchFilesArgs struct {
	Root
	Query   string              `json:"query" jsonschema:"Text to search for, or a regular expression (RE2 syntax) when options.regex is true."`
	Options *SearchFilesOptions `json:"options,omitempty"`
}

type SearchFilesOptions struct {
	Regex         bool     `json:"regex,omitempty" jsonschema:"Treat query as a regular expression (RE2). Default false."`
	CaseSensitive bool     `json:"caseSensitive,omitempty" jsonschema:"Match case. Default false."`
	Globs         []string `json:"globs,omitempty" jsonschema:"Only search files matching these globs (** allowed; a pattern without / matches file names)."`
	MaxResults    int      `json:"maxResults,omitempty" jsonschema:"Maximum results to return. Default 1000."`
}

type SearchMatch struct {
	Path   string `json:"path" jsonschema:"Workspace-relative path."`
	Line   int    `json:"line" jsonschema:"1-based line number."`
	Column int    `json:"column" jsonschema:"1-based column of the match, in characters."`
	Text   string `json:"text" jsonschema:"The matching line (cut at 500 bytes)."`
}

type SearchFilesResult struct {
	Query     string        `json:"query"`
	Results   []SearchMatch `json:"results"`
	Count     int           `json:"count"`
	Truncated bool          `json:"truncated,omitempty" jsonschema:"The search stopped early: at maxResults, or where more matches would not fit one answer (about 1 MiB). Narrow the query or globs to see the rest."`
	Omitted   int           `json:"omitted,omitempty" jsonschema:"When truncated: how many more matches were found (at least; the search stopped early)."`
}

func validGlobs(field string, globs []string) error {
	for _, g := range globs {
		if !doublestar.ValidatePattern(g) {
			return invalidf(field, "invalid glob %q", g)
		}
	}
	return nil
}

func searchFiles(ctx context.Context, c *call, a *SearchFilesArgs) (*SearchFilesResult, error) {
	if a.Query == "" {
		return nil, invalidf("query", "query must not be empty")
	}
	if len(a.Query) > maxQueryLen {
		return nil, invalidf("query", "query is %d bytes, the limit is %d", len(a.Query), maxQueryLen)
	}
	rel, err := c.resolve(a.WorkspaceRoot, ".", false, 0)
	if err != nil {
		return nil, err
	}
	o := a.Options
	if o == nil {
		o = &SearchFilesOptions{}
	}
	if o.MaxResults < 0 {
		return nil, invalidf("options.maxResults", "maxResults must not be negative")
	}
	if err := validGlobs("options.globs", o.Globs); err != nil {
		return nil, err
	}
	maxR := o.MaxResults
	if maxR == 0 {
		maxR = 1000
	}
	r, err := c.agent.Search(ctx, agent.SearchArgs{Query: a.Query, Path: rel, Regex: o.Regex, CaseSensitive: o.CaseSensitive,
		Globs: o.Globs, MaxResults: min(maxR, 100000), MaxFileSize: c.pol.MaxFileSize(), Hidden: true, Guard: c.guard})
	if err != nil {
		return nil, err
	}
	res := &SearchFilesResult{Query: a.Query, Results: make([]SearchMatch, 0, len(r.Matches)), Truncated: r.Truncated, Omitted: r.Omitted}
	for _, m := range r.Matches {
		res.Results = append(res.Results, SearchMatch{Path: m.Path, Line: m.Line, Column: m.Column, Text: m.Text})
	}
	res.Count = len(res.Results)
	return res, nil
}
