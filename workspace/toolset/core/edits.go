package core

import (
	"context"
	"fmt"
	"sort"
	"unicode/utf8"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/tool"
)

// TextEdit replaces the text between two positions: 1-based lines and 1-based
// characters counted in Unicode code points (the API's positions), end exclusive.
type TextEdit struct {
	StartLine, StartCharacter int
	EndLine, EndCharacter     int
	NewText                   string
}

// FileEdits are the edits of one file, by workspace-relative path.
type FileEdits struct {
	Path  string
	Edits []TextEdit
}

// ApplyEdits applies an edit plan (a rename, a format, a code action) all or nothing:
// every file is checked like a writeFile path (policy, maxFileSize, maxEditSize), read,
// edited in memory, and only then written; if a write fails the files already written
// are put back. It returns the paths it changed.
func ApplyEdits(ctx context.Context, env tool.Env, plan []FileEdits) ([]string, error) {
	c := newCall(env)
	var changes []*change
	for _, f := range plan {
		rel, err := c.resolve(".", f.Path, true, 0)
		if err != nil {
			return nil, err
		}
		orig, _, err := c.agent.ReadFile(ctx, agent.ReadArgs{Path: rel, MaxSize: c.pol.MaxFileSize(), Guard: c.guard})
		if err != nil {
			return nil, err
		}
		out, err := applyTextEdits(orig, f.Edits)
		if err != nil {
			return nil, &failure{Code: "edit_failed", Path: rel, Message: fmt.Sprintf("%s: %v; nothing was changed", rel, err)}
		}
		if _, err := c.resolve(".", rel, true, int64(len(out))); err != nil {
			return nil, err
		}
		changes = append(changes, &change{from: rel, to: rel, original: orig, content: out})
	}
	if err := c.applyPlan(ctx, changes); err != nil {
		return nil, err
	}
	paths := make([]string, 0, len(changes))
	for _, ch := range changes {
		paths = append(paths, ch.to)
	}
	return paths, nil
}

// applyTextEdits applies edits to text; they must not overlap.
func applyTextEdits(text []byte, edits []TextEdit) ([]byte, error) {
	type span struct {
		start, end int
		text       string
	}
	spans := make([]span, 0, len(edits))
	for _, e := range edits {
		s, err := offset(text, e.StartLine, e.StartCharacter)
		if err != nil {
			return nil, err
		}
		end, err := offset(text, e.EndLine, e.EndCharacter)
		if err != nil {
			return nil, err
		}
		if end < s {
			return nil, fmt.Errorf("edit ends before it starts at %d:%d", e.StartLine, e.StartCharacter)
		}
		spans = append(spans, span{s, end, e.NewText})
	}
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	out := make([]byte, 0, len(text))
	at := 0
	for _, sp := range spans {
		if sp.start < at {
			return nil, fmt.Errorf("edits overlap")
		}
		out = append(append(out, text[at:sp.start]...), sp.text...)
		at = sp.end
	}
	return append(out, text[at:]...), nil
}

// offset is the byte offset of a 1-based line and 1-based code-point character; the
// character just past a line's end (before its newline) and the line after the last
// are valid, as edits need them.
func offset(text []byte, line, char int) (int, error) {
	if line < 1 || char < 1 {
		return 0, fmt.Errorf("position %d:%d is before the start", line, char)
	}
	at := 0
	for l := 1; l < line; l++ {
		i := indexByte(text[at:], '\n')
		if i < 0 {
			if l == line-1 && char == 1 {
				return len(text), nil // the line after a last line without newline
			}
			return 0, fmt.Errorf("line %d is past the end", line)
		}
		at += i + 1
	}
	for c := 1; c < char; c++ {
		if at >= len(text) || text[at] == '\n' || (text[at] == '\r' && at+1 < len(text) && text[at+1] == '\n') {
			return 0, fmt.Errorf("character %d is past the end of line %d", char, line)
		}
		_, n := utf8.DecodeRune(text[at:])
		at += n
	}
	return at, nil
}

func indexByte(b []byte, c byte) int {
	for i := range b {
		if b[i] == c {
			return i
		}
	}
	return -1
}
