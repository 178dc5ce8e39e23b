package workspace

import "github.com/cwsdev/cws/workspace/tool"

// Tool is one catalogue entry (see package tool); Annotations are its MCP hints.
type (
	Tool        = tool.Tool
	Annotations = tool.Annotations
)

// Catalog is the fixed set of tools, in listing order.
type Catalog struct {
	tools  []*Tool
	byName map[string]*Tool
}

// NewCatalog returns the catalogue of tools, in listing order. Names must be unique.
func NewCatalog(tools ...*Tool) *Catalog {
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
