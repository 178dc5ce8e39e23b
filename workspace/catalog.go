package workspace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
)

// Annotations are the MCP tool hints.
type Annotations struct {
	ReadOnly    bool `json:"readOnlyHint"`
	Destructive bool `json:"destructiveHint"`
	Idempotent  bool `json:"idempotentHint"`
	OpenWorld   bool `json:"openWorldHint"`
}

// Tool is one entry of the catalogue: MCP and REST both serve from it.
type Tool struct {
	Name         string
	Title        string
	Description  string
	Toolset      string // core, vscode, lsp
	Annotations  Annotations
	InputSchema  *jsonschema.Schema
	OutputSchema *jsonschema.Schema
	// Streams is true for tools that report output while they run (progress).
	Streams bool
	// Scope is the token scope a call needs (auth.ScopeTools*), from the tool's kind.
	Scope string

	required []string
	run      func(ctx context.Context, c *call, raw json.RawMessage) (any, error)
}

// Catalog is the fixed set of tools, in listing order.
type Catalog struct {
	tools  []*Tool
	byName map[string]*Tool
}

func newCatalog(tools ...*Tool) *Catalog {
	c := &Catalog{byName: map[string]*Tool{}}
	for _, t := range tools {
		if _, dup := c.byName[t.Name]; dup {
			panic("duplicate tool " + t.Name)
		}
		c.tools = append(c.tools, t)
		c.byName[t.Name] = t
	}
	return c
}

// Tools returns the tools of the given toolsets (all when none are given), in order.
func (c *Catalog) Tools(toolsets ...string) []*Tool {
	var out []*Tool
	for _, t := range c.tools {
		if len(toolsets) == 0 || contains(toolsets, t.Toolset) {
			out = append(out, t)
		}
	}
	return out
}

// Lookup finds a tool by name.
func (c *Catalog) Lookup(name string) (*Tool, bool) {
	t, ok := c.byName[name]
	return t, ok
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// kind is what a tool does, as MCP annotations and the scope a call needs.
type kind struct {
	ann   Annotations
	scope string
}

// defaults maps dotted property paths ("options.atomic") to default values shown in the schema.
type defaults map[string]any

// def builds a typed tool: A is decoded strictly from the call's arguments, R is the result.
// Their JSON Schemas are inferred from the Go types and their `jsonschema` tags.
func def[A, R any](name, toolset, title, desc string, k kind, dflt defaults, fn func(ctx context.Context, c *call, a *A) (*R, error)) *Tool {
	opts := &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[time.Time](): {Type: "string", Format: "date-time"},
	}}
	in, err := jsonschema.For[A](opts)
	if err != nil {
		panic(fmt.Sprintf("schema for %s args: %v", name, err))
	}
	out, err := jsonschema.For[R](opts)
	if err != nil {
		panic(fmt.Sprintf("schema for %s result: %v", name, err))
	}
	for path, v := range dflt {
		setDefault(in, path, v)
	}
	return &Tool{
		Name: name, Title: title, Description: desc, Toolset: toolset, Annotations: k.ann, Scope: k.scope,
		InputSchema: in, OutputSchema: out, required: in.Required,
		run: func(ctx context.Context, c *call, raw json.RawMessage) (any, error) {
			var a A
			if err := decodeArgs(raw, in.Required, &a); err != nil {
				return nil, err
			}
			return fn(ctx, c, &a)
		},
	}
}

func setDefault(s *jsonschema.Schema, path string, v any) {
	head, rest, nested := strings.Cut(path, ".")
	p := s.Properties[head]
	if p == nil {
		panic("no schema property " + head)
	}
	if nested {
		setDefault(p, rest, v)
		return
	}
	b, _ := json.Marshal(v)
	p.Default = b
}

// decodeArgs decodes a call's arguments strictly: unknown fields, missing required
// fields and wrong types are ErrInvalid naming the field.
func decodeArgs(raw json.RawMessage, required []string, v any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return invalidf("arguments", "arguments must be a JSON object: %v", err)
	}
	var missing []string
	for _, r := range required {
		if b, ok := top[r]; !ok || string(b) == "null" {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return invalidf(missing[0], "missing required argument %s", strings.Join(missing, ", "))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return invalidf(te.Field, "argument %s must be %s, not %s", te.Field, te.Type, te.Value)
		}
		msg := err.Error()
		if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
			f = strings.Trim(f, `"`)
			return invalidf(f, "unknown argument %q", f)
		}
		return invalidf("arguments", "bad arguments: %v", err)
	}
	return nil
}
