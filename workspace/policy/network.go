package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cwsdev/cws/egress"
)

// Network is the policy's network field: false (no way out), true (any public name,
// through the egress proxy: private, loopback, link-local and metadata addresses are
// refused as for an allow list), {"allow": [...], "deny": [...]}, an allow list by name
// that the proxy enforces (package egress: host, *.host, host:port, an IP, a CIDR, or a
// preset such as @go; deny wins), or "direct" (tenants file only: the sandbox gets a
// network device of its own and bypasses the proxy, its rules and its audit — unsafe
// on a cloud host, where it reaches the instance's metadata and credentials).
type Network struct {
	// Open is network: true, or "direct".
	Open bool
	// Direct is network: "direct": a route of the sandbox's own, no proxy.
	Direct bool
	// Allow and Deny are the object form's lists; Listed says the object form was used.
	Allow, Deny []string
	Listed      bool

	rules egress.Rules // parsed Allow and Deny (Listed only)
}

// IsZero reports network: false (for omitzero).
func (n Network) IsZero() bool { return !n.Open && !n.Listed && !n.Direct }

// MarshalJSON writes false, true, "direct" or the object.
func (n Network) MarshalJSON() ([]byte, error) {
	switch {
	case n.Listed:
		return json.Marshal(struct {
			Allow []string `json:"allow"`
			Deny  []string `json:"deny,omitempty"`
		}{Allow: append([]string{}, n.Allow...), Deny: n.Deny})
	case n.Direct:
		return []byte(`"direct"`), nil
	case n.Open:
		return []byte("true"), nil
	}
	return []byte("false"), nil
}

// networkForms is what UnmarshalJSON accepts, for its errors.
const networkForms = `network must be false, true, "direct" or {"allow": [...], "deny": [...]}`

// UnmarshalJSON reads false, true, "direct" or {"allow": [...], "deny": [...]} and
// checks every entry: an unknown form is an error naming it.
func (n *Network) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch string(b) {
	case "true":
		*n = Network{Open: true}
		return nil
	case `"direct"`:
		*n = Network{Open: true, Direct: true}
		return nil
	case "false", "null":
		*n = Network{}
		return nil
	}
	if len(b) == 0 || b[0] != '{' {
		return fmt.Errorf("%s, not %.40s", networkForms, b)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var o struct {
		Allow []string `json:"allow"`
		Deny  []string `json:"deny"`
	}
	if err := dec.Decode(&o); err != nil {
		return fmt.Errorf("network: %v", err)
	}
	rules, err := egress.ParseRules(o.Allow, o.Deny)
	if err != nil {
		return fmt.Errorf("network: %v", err)
	}
	*n = Network{Allow: o.Allow, Deny: o.Deny, Listed: true, rules: rules}
	return nil
}

// Egress is the session's egress policy: tenant narrowed by the workspace file
// (network and egress.maxConnections).
func (e *Effective) Egress() egress.Policy { return e.egress }

// narrowNetwork narrows the tenant's network by a workspace file's: false wins, an
// allow list intersects.
func narrowNetwork(tenant *Network, ws *Network) egress.Policy {
	p := egress.Policy{}
	if tenant == nil {
		return p
	}
	switch {
	case tenant.Listed:
		p.Mode, p.Rules = egress.Listed, tenant.rules
	case tenant.Open:
		p.Mode = egress.Open
	default:
		return p
	}
	if ws == nil {
		return p
	}
	switch {
	case ws.Listed && p.Mode == egress.Open:
		p.Mode, p.Rules = egress.Listed, ws.rules
	case ws.Listed:
		p.Rules = p.Rules.Narrow(ws.rules)
	case !ws.Open:
		p.Mode = egress.Off
	}
	return p
}

// Egress is the tenant-only "egress" object.
type Egress struct {
	// MaxConnections caps a session's concurrent egress connections; zero means
	// egress.DefaultMaxConns.
	MaxConnections int `json:"maxConnections,omitzero"`
}

// Ports is previewPorts: ports and ranges, as [3000, "8000-8099"].
type Ports struct {
	ranges [][2]int
	raw    []json.RawMessage
}

// MarshalJSON writes the list as given.
func (p Ports) MarshalJSON() ([]byte, error) {
	if p.raw == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(p.raw)
}

// IsZero: no previewPorts field.
func (p Ports) IsZero() bool { return p.raw == nil }

// UnmarshalJSON reads a list of ports (numbers) and ranges ("8000-8099").
func (p *Ports) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf(`previewPorts must be a list of ports and ranges, as [3000, "8000-8099"]`)
	}
	if len(raw) > MaxListLen {
		return fmt.Errorf("previewPorts has more than %d entries", MaxListLen)
	}
	out := Ports{raw: raw, ranges: make([][2]int, 0, len(raw))}
	for i, r := range raw {
		lo, hi, err := parsePortEntry(r)
		if err != nil {
			return fmt.Errorf("previewPorts[%d] %s: %v", i, r, err)
		}
		out.ranges = append(out.ranges, [2]int{lo, hi})
	}
	*p = out
	return nil
}

func parsePortEntry(r json.RawMessage) (int, int, error) {
	var n json.Number
	var s string
	dec := json.NewDecoder(bytes.NewReader(r))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return 0, 0, err
	}
	switch x := v.(type) {
	case json.Number:
		n = x
		i, err := strconv.Atoi(n.String())
		if err != nil || i < 1 || i > 65535 {
			return 0, 0, fmt.Errorf("a port is 1-65535")
		}
		return i, i, nil
	case string:
		s = x
	default:
		return 0, 0, fmt.Errorf(`an entry is a port or a range "low-high"`)
	}
	a, b, ok := strings.Cut(s, "-")
	lo, err1 := strconv.Atoi(a)
	hi, err2 := lo, error(nil)
	if ok {
		hi, err2 = strconv.Atoi(b)
	}
	if err1 != nil || err2 != nil || lo < 1 || hi > 65535 || lo > hi {
		return 0, 0, fmt.Errorf(`a range is "low-high" with 1 <= low <= high <= 65535`)
	}
	return lo, hi, nil
}

// has reports whether port is in p.
func (p Ports) has(port int) bool {
	return slices.ContainsFunc(p.ranges, func(r [2]int) bool { return r[0] <= port && port <= r[1] })
}

// PreviewAllowed reports whether port may be reached from outside (previewPorts of
// the tenant and of the workspace file: both must list it; none listed: none).
func (e *Effective) PreviewAllowed(port int) bool {
	if len(e.preview) == 0 {
		return false
	}
	for _, p := range e.preview {
		if !p.has(port) {
			return false
		}
	}
	return true
}
