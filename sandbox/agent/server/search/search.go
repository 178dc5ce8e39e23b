// Package search serves the search operation of package agent: a grep of the workspace,
// beneath a Workspace and under the request's guard, that skips what .gitignore, the
// guard and the binary check leave out.
package search

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"regexp/syntax"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
)

// Search bounds.
const (
	defaultMaxResults = 1000
	defaultMaxLineLen = 500
	maxQueryLen       = 8 << 10
)

// Handler serves search on a workspace.
type Handler struct{ WS *fs.Workspace }

// matcher finds the next match in buf at or after from: start and end offsets, or -1.
type matcher interface {
	next(buf []byte, from int) (int, int)
}

// Search finds a query in the workspace's files (agent.SearchArgs).
func (h *Handler) Search(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.SearchArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	if a.Query == "" {
		return nil, agent.Errorf(agent.CodeInvalid, "", "query must not be empty")
	}
	if len(a.Query) > maxQueryLen {
		return nil, agent.Errorf(agent.CodeTooLarge, "", "query is %d bytes, the limit is %d", len(a.Query), maxQueryLen)
	}
	for _, g := range a.Globs {
		if !doublestar.ValidatePattern(g) {
			return nil, agent.Errorf(agent.CodeInvalid, "", "invalid glob %q", g)
		}
	}
	m, err := newMatcher(a.Query, a.Regex, a.CaseSensitive)
	if err != nil {
		return nil, err
	}
	if a.MaxResults <= 0 {
		a.MaxResults = defaultMaxResults
	}
	if a.MaxLineLen <= 0 {
		a.MaxLineLen = defaultMaxLineLen
	}
	if a.Path == "" {
		a.Path = "."
	}
	t, err := h.WS.Open(a.Path, a.Guard, false)
	if err != nil {
		return nil, err
	}

	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu      sync.Mutex
		matches []agent.Match
		found   atomic.Int64
		stopped atomic.Bool // we stopped early at MaxResults
	)
	// Each worker searches whole directories: it opens the directory once through the
	// workspace root, then each file relative to it (openat, O_NOFOLLOW).
	scanned, walkErr := h.walkSearch(ctx, t, &a, func(w *searchWorker, rel string, buf []byte) {
		hay := buf
		if _, isLower := m.(*lowerMatcher); isLower {
			w.low = lowerASCII(w.low, buf)
			hay = w.low
		}
		ms := scanFile(m, hay, buf, rel, a.MaxLineLen)
		if len(ms) == 0 {
			return
		}
		if n := found.Add(int64(len(ms))); n >= int64(a.MaxResults) {
			stopped.Store(true)
			cancel()
		}
		mu.Lock()
		matches = append(matches, ms...)
		mu.Unlock()
	})
	if err := parent.Err(); err != nil {
		return nil, err
	}
	if walkErr != nil && !stopped.Load() {
		return nil, walkErr
	}
	sort.Slice(matches, func(i, j int) bool {
		if matches[i].Path != matches[j].Path {
			return matches[i].Path < matches[j].Path
		}
		return matches[i].Line < matches[j].Line || (matches[i].Line == matches[j].Line && matches[i].Column < matches[j].Column)
	})
	res := agent.SearchResult{Matches: matches, FilesSearched: scanned}
	if res.Matches == nil {
		res.Matches = []agent.Match{}
	}
	all := len(res.Matches)
	if stopped.Load() {
		res.Truncated = true
		res.Matches = res.Matches[:min(len(res.Matches), a.MaxResults)]
	}
	if n := fitAnswer(res.Matches); n < len(res.Matches) {
		res.Truncated = true
		res.Matches = res.Matches[:n]
	}
	res.Omitted = all - len(res.Matches)
	return res, nil
}

// fitAnswer returns how many of ms fit one answer once encoded as JSON (op.Budget).
func fitAnswer(ms []agent.Match) int {
	b := op.NewBudget()
	for i, m := range ms {
		// {"path":"","line":,"column":,"text":""}, with room for the numbers.
		if !b.Take(64 + op.JSONLen(m.Path) + op.JSONLen(m.Text)) {
			return i
		}
	}
	return len(ms)
}

// scanFile finds matches in hay (the file, or its lowered copy) and reports lines of buf.
func scanFile(m matcher, hay, buf []byte, rel string, maxLine int) []agent.Match {
	var out []agent.Match
	line, lineStart, counted := 1, 0, 0
	for from := 0; from <= len(hay); {
		st, _ := m.next(hay, from)
		if st < 0 {
			break
		}
		line += bytes.Count(buf[counted:st], []byte{'\n'})
		counted = st
		if i := bytes.LastIndexByte(buf[:st], '\n'); i >= 0 {
			lineStart = i + 1
		} else {
			lineStart = 0
		}
		lineEnd := len(buf)
		if i := bytes.IndexByte(buf[st:], '\n'); i >= 0 {
			lineEnd = st + i
		}
		text := bytes.TrimRight(buf[lineStart:lineEnd], "\r")
		if len(text) > maxLine {
			text = text[:maxLine]
		}
		out = append(out, agent.Match{
			Path:   rel,
			Line:   line,
			Column: utf8.RuneCount(buf[lineStart:st]) + 1,
			Text:   string(bytes.ToValidUTF8(text, []byte("\uFFFD"))),
		})
		from = lineEnd + 1 // one match per line, like grep
	}
	return out
}

func newMatcher(q string, isRegex, caseSensitive bool) (matcher, error) {
	if !isRegex {
		if caseSensitive {
			if len(q) > 1 {
				return newAnchorMatcher(q, false), nil
			}
			return literalMatcher(q), nil
		}
		if isASCII(q) {
			if m := newAnchorMatcher(q, true); m != nil {
				return m, nil
			}
			return &lowerMatcher{q: lowerASCII(nil, []byte(q))}, nil
		}
		q = regexp.QuoteMeta(q)
	}
	flags := "(?m)"
	if !caseSensitive {
		flags = "(?mi)"
	}
	re, err := regexp.Compile(flags + q)
	if err != nil {
		return nil, agent.Errorf(agent.CodeInvalid, "", "invalid regex: %v", err)
	}
	if n := progSize(flags + q); n > maxRegexProg {
		return nil, agent.Errorf(agent.CodeInvalid, "", "regex too complex (%d instructions, the limit is %d): simplify counted repetitions like {1000}", n, maxRegexProg)
	}
	if lit := requiredLiteral(flags + q); len(lit) >= 3 {
		return &literalRegexMatcher{re: re, lit: lit}, nil
	}
	return regexMatcher{re}, nil
}

type literalMatcher []byte

func (l literalMatcher) next(buf []byte, from int) (int, int) {
	i := bytes.Index(buf[from:], l)
	if i < 0 {
		return -1, -1
	}
	return from + i, from + i + len(l)
}

// lowerMatcher searches an ASCII-lowered copy of the file for an ASCII-lowered query:
// case-insensitive at the speed of bytes.Index.
type lowerMatcher struct{ q []byte }

func (l *lowerMatcher) next(buf []byte, from int) (int, int) {
	return literalMatcher(l.q).next(buf, from)
}

// anchorMatcher finds a literal by its rarest byte (memchr-fast scanning for that byte),
// then compares the query around it. Ignoring ASCII case, the anchor is a byte without
// case (punctuation, a digit, a space), so no lowered copy of the file is needed.
type anchorMatcher struct {
	q    []byte // the query, lowered when fold
	at   int    // the anchor's position in q
	key  byte
	fold bool // ignore ASCII case
}

// byteRank estimates how common a byte is in source code (higher is more common), so
// the anchor is the rarest byte of the query: fewer false candidates to check.
func byteRank(c byte) int {
	switch {
	case c == ' ' || c == '\t' || c == '\n':
		return 250
	case strings.IndexByte("etaoinsrlhdc", c) >= 0:
		return 220
	case 'a' <= c && c <= 'z':
		return 180
	case strings.IndexByte(".,;:_=()", c) >= 0:
		return 150
	case 'A' <= c && c <= 'Z':
		return 120
	case '0' <= c && c <= '9':
		return 110
	}
	return 100
}

// newAnchorMatcher picks the query's rarest byte as the anchor. Ignoring case, only
// bytes without case (not letters) can anchor; it returns nil when there is none.
func newAnchorMatcher(q string, fold bool) *anchorMatcher {
	best, rank := -1, 1<<30
	for i := 0; i < len(q); i++ {
		c := q[i]
		if fold && (('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')) {
			continue
		}
		if r := byteRank(c); r < rank {
			best, rank = i, r
		}
	}
	if best < 0 {
		return nil
	}
	m := &anchorMatcher{q: []byte(q), at: best, key: q[best], fold: fold}
	if fold {
		m.q = lowerASCII(nil, m.q)
	}
	return m
}

func (m *anchorMatcher) next(buf []byte, from int) (int, int) {
	for pos := from + m.at; pos < len(buf); {
		i := bytes.IndexByte(buf[pos:], m.key)
		if i < 0 {
			return -1, -1
		}
		st := pos + i - m.at
		if end := st + len(m.q); st >= 0 && end <= len(buf) && m.equal(buf[st:end]) {
			return st, end
		}
		pos += i + 1
	}
	return -1, -1
}

func (m *anchorMatcher) equal(b []byte) bool {
	if m.fold {
		return equalFoldASCII(b, m.q)
	}
	return bytes.Equal(b, m.q)
}

// equalFoldASCII compares b with the lowered ASCII query q, ignoring ASCII case.
func equalFoldASCII(b, q []byte) bool {
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != q[i] {
			return false
		}
	}
	return true
}

// maxRegexProg bounds a regex's compiled size. RE2 runs in linear time, but the
// constant is the program's size: (a|b){1000}c scans a few MiB for minutes.
const maxRegexProg = 2000

func progSize(expr string) int {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return 0
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0
	}
	return len(prog.Inst)
}

// requiredLiteral returns a case-sensitive literal every match must contain (the
// longest literal piece of a top-level concatenation), or nil.
func requiredLiteral(expr string) []byte {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil
	}
	re = re.Simplify()
	var best []rune
	if re.Op == syntax.OpConcat {
		for _, sub := range re.Sub {
			if sub.Op == syntax.OpLiteral && sub.Flags&syntax.FoldCase == 0 && len(sub.Rune) > len(best) {
				best = sub.Rune
			}
		}
	} else if re.Op == syntax.OpLiteral && re.Flags&syntax.FoldCase == 0 {
		best = re.Rune
	}
	return []byte(string(best))
}

// literalRegexMatcher finds lines holding a literal every match needs (memchr-fast),
// and runs the regexp on those lines only, as grep-like tools do. Matches are per line.
type literalRegexMatcher struct {
	re  *regexp.Regexp
	lit []byte
}

func (m *literalRegexMatcher) next(buf []byte, from int) (int, int) {
	for from < len(buf) {
		i := bytes.Index(buf[from:], m.lit)
		if i < 0 {
			return -1, -1
		}
		at := from + i
		ls := bytes.LastIndexByte(buf[:at], '\n') + 1
		if ls < from {
			ls = from
		}
		le := len(buf)
		if j := bytes.IndexByte(buf[at:], '\n'); j >= 0 {
			le = at + j
		}
		if loc := m.re.FindIndex(buf[ls:le]); loc != nil {
			return ls + loc[0], ls + loc[1]
		}
		from = le + 1
	}
	return -1, -1
}

type regexMatcher struct{ re *regexp.Regexp }

func (r regexMatcher) next(buf []byte, from int) (int, int) {
	loc := r.re.FindIndex(buf[from:])
	if loc == nil {
		return -1, -1
	}
	return from + loc[0], from + loc[1]
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// lowerASCII lowers ASCII letters of src into dst (reused), leaving other bytes alone,
// so offsets in dst are offsets in src.
func lowerASCII(dst, src []byte) []byte {
	if cap(dst) < len(src) {
		dst = make([]byte, len(src), max(len(src), 2*cap(dst)))
	}
	dst = dst[:len(src)]
	for i, c := range src {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst[i] = c
	}
	return dst
}
