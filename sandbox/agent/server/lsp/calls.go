package lsp

import (
	"context"
	"encoding/json"

	"github.com/cwsdev/cws/sandbox/agent"
)

// A CallHierarchyItem travels as the server made it, with every field it set (data
// included), except that its uri is a display URI and its range and selectionRange are
// API ranges. Passed back to get_incoming_calls or get_outgoing_calls, it is converted
// back exactly, so the server gets its own item again.

// itemOut converts a server's item for a result; ok is false when the guard refuses its
// file. t is the item's text.
func (c *call) itemOut(raw json.RawMessage) (map[string]json.RawMessage, *Text, bool, error) {
	var item map[string]json.RawMessage
	if err := json.Unmarshal(raw, &item); err != nil {
		return nil, nil, false, err
	}
	var uri string
	_ = json.Unmarshal(item["uri"], &uri)
	t, pl, ok := c.text(uri)
	if !ok {
		c.dropped++
		return nil, nil, false, nil
	}
	item["uri"], _ = json.Marshal(pl.display)
	for _, k := range []string{"range", "selectionRange"} {
		var r Range
		if json.Unmarshal(item[k], &r) == nil {
			item[k], _ = json.Marshal(c.span(t, r))
		}
	}
	return item, t, true, nil
}

// itemIn converts an item a client passed back to the server's form, reading its file
// through the guard (and syncing it, which also starts its language's server).
func (c *call) itemIn(ctx context.Context, raw json.RawMessage) (map[string]json.RawMessage, *Text, error) {
	var item map[string]json.RawMessage
	if err := json.Unmarshal(raw, &item); err != nil || item == nil {
		return nil, nil, agent.Errorf(agent.CodeInvalid, "", "item must be a call hierarchy item from prepare_call_hierarchy")
	}
	var display string
	if err := json.Unmarshal(item["uri"], &display); err != nil || display == "" {
		return nil, nil, agent.Errorf(agent.CodeInvalid, "", "item.uri is required")
	}
	uri, err := c.m.fromDisplay(display)
	if err != nil {
		return nil, nil, err
	}
	var t *Text
	pl, _ := c.locate(uri)
	if pl.rel != "" {
		if t, _, err = c.open(ctx, pl.rel); err != nil {
			return nil, nil, err
		}
	} else {
		// Outside the workspace (a stdlib function): the language comes from the name.
		lang, _, err := c.m.languageOf(pl.abs)
		if err != nil {
			return nil, nil, err
		}
		if c.s, err = c.m.get(ctx, lang); err != nil {
			return nil, nil, err
		}
		t, _, _ = c.text(uri)
	}
	item["uri"], _ = json.Marshal(uri)
	for _, k := range []string{"range", "selectionRange"} {
		var sp Span
		if err := json.Unmarshal(item[k], &sp); err != nil {
			return nil, nil, agent.Errorf(agent.CodeInvalid, "", "item.%s must be a range", k)
		}
		r := Range{Start: Position{sp.Start.Line - 1, sp.Start.Character - 1}, End: Position{sp.End.Line - 1, sp.End.Character - 1}}
		if t != nil {
			if r, err = t.SpanToLSP(sp, c.s.enc); err != nil {
				return nil, nil, err
			}
		}
		item[k], _ = json.Marshal(r)
	}
	return item, t, nil
}

func prepareCallHierarchy(ctx context.Context, c *call, raw json.RawMessage) (any, error) {
	var a posArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	uri, p, err := c.at(ctx, a)
	if err != nil {
		return nil, err
	}
	var res []json.RawMessage
	if err := c.s.call(ctx, "textDocument/prepareCallHierarchy", textDocumentPosition(uri, p), &res); err != nil {
		return nil, err
	}
	out := []map[string]json.RawMessage{}
	for _, it := range res {
		item, _, ok, err := c.itemOut(it)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, item)
		}
	}
	return out, nil
}

// incomingCall and outgoingCall are the results of the two call tools.
type incomingCall struct {
	From       map[string]json.RawMessage `json:"from"`
	FromRanges []Span                     `json:"fromRanges"`
}

type outgoingCall struct {
	To         map[string]json.RawMessage `json:"to"`
	FromRanges []Span                     `json:"fromRanges"`
}

type itemArgs struct {
	Item json.RawMessage `json:"item"`
}

func getIncomingCalls(ctx context.Context, c *call, raw json.RawMessage) (any, error) {
	var a itemArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	item, _, err := c.itemIn(ctx, a.Item)
	if err != nil {
		return nil, err
	}
	var res []struct {
		From       json.RawMessage `json:"from"`
		FromRanges []Range         `json:"fromRanges"`
	}
	if err := c.s.call(ctx, "callHierarchy/incomingCalls", map[string]any{"item": item}, &res); err != nil {
		return nil, err
	}
	out := []incomingCall{}
	for _, call := range res {
		from, t, ok, err := c.itemOut(call.From)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		// fromRanges are in the caller's file.
		ranges := make([]Span, len(call.FromRanges))
		for i, r := range call.FromRanges {
			ranges[i] = c.span(t, r)
		}
		out = append(out, incomingCall{From: from, FromRanges: ranges})
	}
	return out, nil
}

func getOutgoingCalls(ctx context.Context, c *call, raw json.RawMessage) (any, error) {
	var a itemArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	item, t, err := c.itemIn(ctx, a.Item)
	if err != nil {
		return nil, err
	}
	var res []struct {
		To         json.RawMessage `json:"to"`
		FromRanges []Range         `json:"fromRanges"`
	}
	if err := c.s.call(ctx, "callHierarchy/outgoingCalls", map[string]any{"item": item}, &res); err != nil {
		return nil, err
	}
	out := []outgoingCall{}
	for _, call := range res {
		to, _, ok, err := c.itemOut(call.To)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		// fromRanges are in the file of the item asked about, the caller.
		ranges := make([]Span, len(call.FromRanges))
		for i, r := range call.FromRanges {
			ranges[i] = c.span(t, r)
		}
		out = append(out, outgoingCall{To: to, FromRanges: ranges})
	}
	return out, nil
}
