package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"regexp"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/cwsdev/cws/sandbox/agent"
)

// Search bounds.
const (
	defaultMaxResults = 1000
	defaultMaxLineLen = 500
	maxQueryLen       = 8 << 10
)

// matcher finds the next match in buf at or after from: start and end offsets, or -1.
type matcher interface {
	next(buf []byte, from int) (int, int)
}

func (s *Server) search(ctx context.Context, args json.RawMessage, _ []byte, _ *responder) (any, error) {
	var a agent.SearchArgs
	if err := decode(args, &a); err != nil {
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
	t, err := s.ws.open(a.Path, a.Guard, false)
	if err != nil {
		return nil, err
	}

	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stopped atomic.Bool // we stopped early at MaxResults
	files := make(chan walkedFile, 256)
	var walkErr error
	go func() {
		defer close(files)
		walkErr = s.walkFiles(ctx, t, &a, files)
	}()

	var (
		mu      sync.Mutex
		matches []agent.Match
		found   atomic.Int64
		scanned atomic.Int64
		wg      sync.WaitGroup
	)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf, low []byte
			for f := range files {
				if ctx.Err() != nil {
					continue // drain
				}
				var ok bool
				buf, ok = s.readForSearch(f, a.MaxFileSize, buf)
				if !ok {
					continue
				}
				scanned.Add(1)
				hay := buf
				if _, isLower := m.(*lowerMatcher); isLower {
					low = lowerASCII(low, buf)
					hay = low
				}
				ms := scanFile(m, hay, buf, f.rel, a.MaxLineLen)
				if len(ms) == 0 {
					continue
				}
				if n := found.Add(int64(len(ms))); n >= int64(a.MaxResults) {
					stopped.Store(true)
					cancel()
				}
				mu.Lock()
				matches = append(matches, ms...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
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
	res := agent.SearchResult{Matches: matches, FilesSearched: int(scanned.Load())}
	if res.Matches == nil {
		res.Matches = []agent.Match{}
	}
	if stopped.Load() {
		res.Truncated = true
		res.Matches = res.Matches[:min(len(res.Matches), a.MaxResults)]
	}
	return res, nil
}

// readForSearch reads a whole file into buf, skipping binaries and oversized files.
func (s *Server) readForSearch(f walkedFile, maxSize int64, buf []byte) ([]byte, bool) {
	if maxSize > 0 && f.size > maxSize {
		return buf, false
	}
	fh, err := s.ws.root.Open(f.real)
	if err != nil {
		return buf, false
	}
	defer fh.Close()
	need := int(f.size) + 1
	if cap(buf) < need {
		buf = make([]byte, 0, need+need/4)
	}
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := fh.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF || (err == nil && n == 0) {
			break
		}
		if err != nil {
			return buf, false
		}
	}
	if bytes.IndexByte(buf[:min(len(buf), binarySniff)], 0) >= 0 {
		return buf, false
	}
	return buf, true
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
			return literalMatcher(q), nil
		}
		if isASCII(q) {
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
		dst = make([]byte, len(src), len(src)+len(src)/4)
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

// walkedFile is one regular file the walk found.
type walkedFile struct {
	rel, real string
	size      int64
}
