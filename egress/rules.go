// Package egress decides where a workspace's processes may connect. [Rules] is
// a tenant's (or a workspace file's) allow/deny list of host names, ports, IP
// addresses and CIDRs, asked by cws's egress proxy before it dials host:port.
// [Guard] then refuses resolved addresses that are loopback, private,
// link-local, cloud metadata and the like, so that an allowed name cannot lead
// into cws's own network.
//
// The proxy (proxy.go) applies them, and puts a session's secrets into the requests
// that may carry them (inject.go, terminate.go).
//
// The package depends on nothing else of cws but package secrets.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// MaxEntries is the most entries an allow or deny list may hold (a preset
// counts as one).
const MaxEntries = 1024

// Presets are the named host lists that an entry such as "@go" expands to.
// Their entries are written like any other entry.
var Presets = map[string][]string{
	"@go": {
		"proxy.golang.org:443", "sum.golang.org:443", "index.golang.org:443",
		"go.dev:443", "golang.org:443", "*.golang.org:443", "storage.googleapis.com:443",
	},
	"@npm": {
		"registry.npmjs.org:443", "*.npmjs.org:443", "registry.yarnpkg.com:443", "*.yarnpkg.com:443",
	},
	"@pypi": {
		"pypi.org:443", "*.pypi.org:443", "files.pythonhosted.org:443", "*.pythonhosted.org:443",
	},
	"@github": {
		"github.com:443", "*.github.com:443", "*.githubusercontent.com:443", "codeload.github.com:443",
		"ghcr.io:443", "*.ghcr.io:443", "*.githubassets.com:443",
	},
	"@debian": {
		"deb.debian.org:80", "deb.debian.org:443",
		"security.debian.org:80", "security.debian.org:443",
		"*.debian.org:80", "*.debian.org:443",
	},
}

// Rules is a parsed allow/deny list. The zero Rules allows nothing.
//
// A host:port is allowed when every allow list (one from [ParseRules], more
// after [Rules.Narrow]) has an entry that matches it and no deny entry does.
type Rules struct {
	allow    [][]entry // every list must have a matching entry
	deny     []entry
	allowStr []string // as given, for display
	denyStr  []string
}

// ParseRules parses an allow and a deny list. Entries are:
//
//   - "host": that name exactly, case-insensitive, a trailing dot ignored;
//   - "*.host": any name at any depth below host, but not host itself;
//   - an IP address ("1.2.3.4", "2001:db8::1") or a CIDR ("10.0.0.0/8", "fd00::/8");
//   - a preset such as "@go" (see [Presets]).
//
// A host name or IP address may be followed by a port ("host:443",
// "*.host:443", "1.2.3.4:8080", "[2001:db8::1]:443"); without one the entry
// matches any port. A CIDR has no port. Name entries match only names and
// IP/CIDR entries only IP addresses. An error names the list and the index of
// the bad entry.
func ParseRules(allow, deny []string) (Rules, error) {
	a, err := parseList("allow", allow)
	if err != nil {
		return Rules{}, err
	}
	d, err := parseList("deny", deny)
	if err != nil {
		return Rules{}, err
	}
	return Rules{
		allow:    [][]entry{a},
		deny:     d,
		allowStr: slices.Clone(allow),
		denyStr:  slices.Clone(deny),
	}, nil
}

// Allows reports whether host:port is allowed: some allow entry matches and
// no deny entry matches (deny wins). host is a name or an IP literal; case and
// a trailing dot do not matter. rule is a short human reason for a refusal,
// e.g. `example.org is not in the allow list` or `example.org:22 is denied by
// "*.example.org"`; it is "" when allowed.
func (r Rules) Allows(host string, port int) (ok bool, rule string) {
	t, err := parseQuery(host)
	if err != nil {
		return false, fmt.Sprintf("%q is not a valid host name or IP address", host)
	}
	if port < 1 || port > 65535 {
		return false, fmt.Sprintf("port %d is out of range", port)
	}
	for _, e := range r.deny {
		if e.matches(t, port) {
			return false, fmt.Sprintf("%s is denied by %s", t.withPort(port), e.describe())
		}
	}
	if r.Empty() {
		return false, fmt.Sprintf("%s is not allowed: the allow list is empty", t)
	}
	for _, list := range r.allow {
		if slices.ContainsFunc(list, func(e entry) bool { return e.matches(t, port) }) {
			continue
		}
		if slices.ContainsFunc(list, func(e entry) bool { return e.matchesHost(t) }) {
			return false, fmt.Sprintf("%s is not in the allow list", t.withPort(port))
		}
		return false, fmt.Sprintf("%s is not in the allow list", t)
	}
	return true, ""
}

// NamesPort reports whether an allow entry that matches host names port explicitly
// (an entry without a port matches every port, but does not name one). Secrets go
// over plain HTTP only to a port their hosts name.
func (r Rules) NamesPort(host string, port int) bool {
	t, err := parseQuery(host)
	if err != nil {
		return false
	}
	for _, list := range r.allow {
		if slices.ContainsFunc(list, func(e entry) bool { return e.port == port && e.matches(t, port) }) {
			return true
		}
	}
	return false
}

// DeniesIP reports whether a resolved address that was dialled by name is
// refused by an IP or CIDR entry of the deny list. Allow entries are not
// consulted: the name already matched one. rule names the deny entry, and is
// "" when ip is not denied. An invalid ip is denied.
func (r Rules) DeniesIP(ip netip.Addr, port int) (denied bool, rule string) {
	if !ip.IsValid() {
		return true, "invalid IP address"
	}
	t := query{ip: ip.Unmap().WithZone("")}
	for _, e := range r.deny {
		if e.kind == kindPrefix && e.matches(t, port) {
			return true, fmt.Sprintf("%s is denied by %s", t.withPort(port), e.describe())
		}
	}
	return false, ""
}

// Narrow returns rules that allow only what both r and w allow: r (the
// tenant's rules) is the ceiling and w (a workspace file's rules) can only
// narrow it. A host:port is denied if either denies it. Narrowed rules can be
// narrowed again. If either r or w is [Rules.Empty], so is the result; a
// caller with no workspace rules should use r itself rather than narrow it by
// the zero Rules.
func (r Rules) Narrow(w Rules) Rules {
	n := Rules{
		deny:    slices.Concat(r.deny, w.deny),
		denyStr: slices.Concat(r.denyStr, w.denyStr),
	}
	if r.Empty() || w.Empty() {
		return n
	}
	n.allow = slices.Concat(r.allow, w.allow)
	n.allowStr = slices.Clone(w.allowStr)
	return n
}

// Empty reports whether r can allow nothing because an allow list has no
// entry. It does not detect allow lists that have no host in common.
func (r Rules) Empty() bool {
	return len(r.allow) == 0 || slices.ContainsFunc(r.allow, func(l []entry) bool { return len(l) == 0 })
}

// Strings returns the allow and deny entries as given (presets unexpanded),
// for display. For rules made by [Rules.Narrow], allow holds the entries of
// the narrowest (last) allow list, which are allowed only where the earlier
// lists allow them too, and deny holds the entries of every deny list.
func (r Rules) Strings() (allow, deny []string) {
	return slices.Clone(r.allowStr), slices.Clone(r.denyStr)
}

type entryKind uint8

const (
	kindName     entryKind = iota // one host name
	kindWildcard                  // any name below name
	kindPrefix                    // an IP address or CIDR
)

// entry is one parsed entry; a preset expands to several.
type entry struct {
	text   string // as written, for messages
	preset string // the preset it came from, "" if none
	kind   entryKind
	name   string       // kindName, kindWildcard: lower case, no trailing dot
	prefix netip.Prefix // kindPrefix
	port   int          // 0 matches any port
}

func (e entry) matchesHost(t query) bool {
	switch e.kind {
	case kindName:
		return !t.ip.IsValid() && t.name == e.name
	case kindWildcard:
		n := len(t.name) - len(e.name)
		return !t.ip.IsValid() && n > 1 && t.name[n-1] == '.' && t.name[n:] == e.name
	default:
		return t.ip.IsValid() && e.prefix.Contains(t.ip)
	}
}

func (e entry) matches(t query, port int) bool {
	return (e.port == 0 || e.port == port) && e.matchesHost(t)
}

func (e entry) describe() string {
	if e.preset != "" {
		return fmt.Sprintf("%q (from %q)", e.text, e.preset)
	}
	return strconv.Quote(e.text)
}

// query is a host being asked about: a name or an IP address.
type query struct {
	name string     // lower case, no trailing dot; "" for an IP address
	ip   netip.Addr // unmapped, no zone
}

func (t query) String() string {
	if t.ip.IsValid() {
		return t.ip.String()
	}
	return t.name
}

func (t query) withPort(port int) string {
	if t.ip.Is6() {
		return "[" + t.ip.String() + "]:" + strconv.Itoa(port)
	}
	return t.String() + ":" + strconv.Itoa(port)
}

// parseQuery normalises a host being asked about. It refuses what no entry
// could name, such as "300.1.1.1" or "a..b".
func parseQuery(host string) (query, error) {
	h := strings.ToLower(host)
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	h = strings.TrimSuffix(h, ".")
	if ip, err := netip.ParseAddr(h); err == nil {
		return query{ip: ip.Unmap().WithZone("")}, nil
	}
	if len(h) > 253 || checkName(h) != nil || allNumeric(h) {
		return query{}, errors.New("invalid host")
	}
	return query{name: h}, nil
}

func parseList(list string, ss []string) ([]entry, error) {
	if len(ss) > MaxEntries {
		return nil, fmt.Errorf("%s: too many entries (%d; at most %d)", list, len(ss), MaxEntries)
	}
	var out []entry
	for i, s := range ss {
		es, err := parseEntry(s)
		if err != nil {
			return nil, fmt.Errorf("%s[%d] %q: %w", list, i, s, err)
		}
		out = append(out, es...)
	}
	return out, nil
}

// parseEntry parses one entry, expanding a preset.
func parseEntry(s string) ([]entry, error) {
	if !strings.HasPrefix(s, "@") {
		e, err := parseOne(s)
		if err != nil {
			return nil, err
		}
		return []entry{e}, nil
	}
	hosts, ok := Presets[strings.ToLower(s)]
	if !ok {
		return nil, fmt.Errorf("unknown preset (known: %s)", strings.Join(presetNames(), ", "))
	}
	out := make([]entry, 0, len(hosts))
	for _, h := range hosts {
		e, err := parseOne(h)
		if err != nil {
			return nil, fmt.Errorf("preset entry %q: %w", h, err)
		}
		e.preset = s
		out = append(out, e)
	}
	return out, nil
}

func presetNames() []string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// parseOne parses an entry that is not a preset.
func parseOne(s string) (entry, error) {
	e := entry{text: s}
	switch {
	case s == "":
		return e, errors.New("empty entry")
	case strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return e, errors.New("spaces and control characters are not allowed")
	case strings.Contains(s, "://"):
		return e, errors.New("a URL is not allowed: give a host, host:port or CIDR")
	case strings.Contains(s, "@"):
		return e, errors.New(`"@" is only allowed at the start of a preset`)
	}
	s = strings.ToLower(s)

	if addr, _, ok := strings.Cut(s, "/"); ok {
		if _, err := netip.ParseAddr(addr); err != nil {
			return e, errors.New("a path is not allowed: give a host, host:port or CIDR")
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return e, errors.New("invalid CIDR")
		}
		e.kind, e.prefix = kindPrefix, normPrefix(p)
		return e, nil
	}

	host, port, hasPort, bracketed, err := splitHostPort(s)
	if err != nil {
		return e, err
	}
	if hasPort {
		if e.port, err = parsePort(port); err != nil {
			return e, err
		}
	}
	if host == "" {
		return e, errors.New("empty host")
	}
	host = strings.TrimSuffix(host, ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return e, errors.New("an IPv6 zone is not allowed")
		}
		if bracketed && !ip.Is6() {
			return e, errors.New("brackets are only for IPv6 addresses")
		}
		ip = ip.Unmap()
		e.kind, e.prefix = kindPrefix, netip.PrefixFrom(ip, ip.BitLen())
		return e, nil
	}
	if bracketed {
		return e, errors.New("brackets are only for IPv6 addresses")
	}
	if len(host) > 253 {
		return e, errors.New("name longer than 253 characters")
	}
	e.kind = kindName
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		e.kind, host = kindWildcard, rest
	}
	if strings.Contains(host, "*") {
		return e, errors.New(`a wildcard is only allowed as a leading "*." label`)
	}
	if err := checkName(host); err != nil {
		return e, err
	}
	if allNumeric(host) {
		if e.kind == kindWildcard {
			return e, errors.New("a wildcard must be followed by a host name, not an IP address")
		}
		return e, errors.New("not a valid IP address")
	}
	e.name = host
	return e, nil
}

// splitHostPort splits "host", "host:port", "[v6]", "[v6]:port" and a bare
// IPv6 address (which has no port).
func splitHostPort(s string) (host, port string, hasPort, bracketed bool, err error) {
	if rest, ok := strings.CutPrefix(s, "["); ok {
		host, rest, ok := strings.Cut(rest, "]")
		if !ok {
			return "", "", false, true, errors.New(`missing "]"`)
		}
		if rest == "" {
			return host, "", false, true, nil
		}
		port, ok := strings.CutPrefix(rest, ":")
		if !ok {
			return "", "", false, true, errors.New(`unexpected text after "]"`)
		}
		return host, port, true, true, nil
	}
	if strings.Count(s, ":") != 1 {
		return s, "", false, false, nil
	}
	host, port, _ = strings.Cut(s, ":")
	return host, port, true, false, nil
}

func parsePort(p string) (int, error) {
	if p == "" || strings.ContainsFunc(p, func(r rune) bool { return r < '0' || r > '9' }) {
		return 0, fmt.Errorf("invalid port %q", p)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %s out of range (1-65535)", p)
	}
	return n, nil
}

// checkName checks a lower-case host name without a trailing dot.
func checkName(name string) error {
	if name == "" {
		return errors.New("empty host name")
	}
	for label := range strings.SplitSeq(name, ".") {
		switch {
		case label == "":
			return errors.New("empty label")
		case len(label) > 63:
			return errors.New("label longer than 63 characters")
		case label[0] == '-' || label[len(label)-1] == '-':
			return errors.New("a label may not start or end with a hyphen")
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("invalid character %q", c)
			}
		}
	}
	return nil
}

// allNumeric reports whether every label of name is digits only, as in a
// dotted-quad IPv4 address.
func allNumeric(name string) bool {
	return !strings.ContainsFunc(name, func(r rune) bool { return r != '.' && (r < '0' || r > '9') })
}

// normPrefix masks p and turns an IPv4-mapped IPv6 prefix into an IPv4 one.
func normPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked()
}
