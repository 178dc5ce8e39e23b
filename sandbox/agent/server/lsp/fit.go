package lsp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/cwsdev/cws/sandbox/agent"
)

// plans are the tools whose result is an edit plan: a part of one would edit some files
// and not others, so a plan over the budget is refused, never cut.
var plans = map[string]bool{"rename_symbol": true, "format_document": true}

// Fit keeps a tool's encoded result within budget, the bytes one answer of the agent
// protocol may give it. An array keeps its first items; an object keeps the first items
// of its largest array (diagnostics, logs, messages) and says "truncated": true and
// "omitted": n. omitted counts the items left out. What cannot be cut to fit (an edit
// plan, a single huge value) is a CodeTooLarge error naming the limit.
func Fit(name string, out json.RawMessage, budget int) (json.RawMessage, int, error) {
	if len(out) <= budget {
		return out, 0, nil
	}
	tooLarge := &agent.WireError{Code: agent.CodeTooLarge, Rule: agent.RuleFrameSize, Message: fmt.Sprintf(
		"the %s result is %d bytes, over the %d bytes one answer from the workspace may hold; ask for less (a smaller file or range, a narrower query)",
		name, len(out), budget)}
	if plans[name] {
		return nil, 0, tooLarge
	}
	switch out[0] {
	case '[':
		return cutArray(out, budget)
	case '{':
		if cut, omitted, ok := cutObject(out, budget); ok {
			return cut, omitted, nil
		}
	}
	return nil, 0, tooLarge
}

// cutArray keeps the longest prefix of the array raw whose encoding fits budget.
func cutArray(raw json.RawMessage, budget int) (json.RawMessage, int, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, 0, err
	}
	var b bytes.Buffer
	b.WriteByte('[')
	kept := 0
	for _, it := range items {
		if b.Len()+len(it)+2 > budget {
			break
		}
		if kept > 0 {
			b.WriteByte(',')
		}
		b.Write(it)
		kept++
	}
	b.WriteByte(']')
	return b.Bytes(), len(items) - kept, nil
}

// cutObject cuts the largest array member of the object raw so that the object, with
// "truncated" and "omitted" added, fits budget. ok is false when that cannot be done.
func cutObject(raw json.RawMessage, budget int) (json.RawMessage, int, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, 0, false
	}
	start, end := -1, -1
	for dec.More() {
		if _, err := dec.Token(); err != nil { // the key
			return nil, 0, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, 0, false
		}
		// Encoded by json.Marshal: no space around values, so v ends where the decoder is.
		if e := int(dec.InputOffset()); len(v) > 0 && v[0] == '[' && len(v) > end-start {
			start, end = e-len(v), e
		}
	}
	if start < 0 {
		return nil, 0, false
	}
	const mark = `,"truncated":true,"omitted":` + "1234567890"
	rest := len(raw) - (end - start) + len(mark)
	if rest >= budget {
		return nil, 0, false
	}
	arr, omitted, err := cutArray(raw[start:end], budget-rest)
	if err != nil {
		return nil, 0, false
	}
	var b bytes.Buffer
	b.Write(raw[:start])
	b.Write(arr)
	b.Write(raw[end : len(raw)-1]) // up to the closing brace
	b.WriteString(`,"truncated":true,"omitted":` + strconv.Itoa(omitted) + "}")
	return b.Bytes(), omitted, true
}
