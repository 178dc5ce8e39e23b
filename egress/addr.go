package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Guard decides which resolved addresses cws may dial for a workspace. The
// nil *Guard refuses the same classes of address as NewGuard(nil, nil).
type Guard struct {
	allowPrivate []netip.Prefix
	denyExtra    []netip.Prefix
}

// NewGuard returns a Guard. allowPrivate are operator CIDRs (cws serve
// --egress-allow-private) that are exempt from the refusal of private and
// other special addresses; a cloud metadata address is exempt only if one of
// them is exactly that address (a /32 or /128). denyExtra are more CIDRs that
// are always refused, even inside allowPrivate, e.g. the cluster's service
// and pod ranges and cws's own listener addresses. Invalid prefixes are
// ignored.
func NewGuard(allowPrivate, denyExtra []netip.Prefix) *Guard {
	g := &Guard{}
	for _, p := range allowPrivate {
		if p.IsValid() {
			g.allowPrivate = append(g.allowPrivate, normPrefix(p))
		}
	}
	for _, p := range denyExtra {
		if p.IsValid() {
			g.denyExtra = append(g.denyExtra, normPrefix(p))
		}
	}
	return g
}

// Check returns nil if ip may be dialled, else an error whose text says why,
// e.g. `127.0.0.1 is a loopback address`, `169.254.169.254 is a cloud metadata
// address` or `10.1.2.3 is a private address`. An IPv4-mapped IPv6 address is
// checked as IPv4, and a NAT64 address (64:ff9b::/96) is refused if the IPv4
// address it embeds is.
func (g *Guard) Check(ip netip.Addr) error {
	if !ip.IsValid() {
		return errors.New("invalid IP address")
	}
	ip = ip.Unmap().WithZone("")
	if nat64Prefix.Contains(ip) {
		b := ip.As16()
		v4 := netip.AddrFrom4([4]byte(b[12:]))
		if why := g.reason(v4); why != "" {
			return fmt.Errorf("%s is a NAT64 address of %s, %s", ip, v4, why)
		}
	}
	if why := g.reason(ip); why != "" {
		return fmt.Errorf("%s is %s", ip, why)
	}
	return nil
}

// reason returns why an unmapped ip is refused ("a private address"), or "".
func (g *Guard) reason(ip netip.Addr) string {
	var allowPrivate, denyExtra []netip.Prefix
	if g != nil {
		allowPrivate, denyExtra = g.allowPrivate, g.denyExtra
	}
	for _, p := range denyExtra {
		if p.Contains(ip) {
			return fmt.Sprintf("a denied address (in %s)", p)
		}
	}
	if slices.Contains(metadataAddrs, ip) {
		if slices.Contains(allowPrivate, netip.PrefixFrom(ip, ip.BitLen())) {
			return ""
		}
		return "a cloud metadata address"
	}
	for _, p := range allowPrivate {
		if p.Contains(ip) {
			return ""
		}
	}
	for _, c := range specialClasses {
		if c.prefix.Contains(ip) {
			return c.what
		}
	}
	return ""
}

// ParsePrefix parses a CIDR ("10.0.0.0/8") or a bare IP address, which
// becomes a /32 or /128. Host bits are cleared, and an IPv4-mapped IPv6
// prefix becomes IPv4.
func ParsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("invalid CIDR %q", s)
		}
		return normPrefix(p), nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil || ip.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("invalid IP address or CIDR %q", s)
	}
	return normPrefix(netip.PrefixFrom(ip, ip.BitLen())), nil
}

// nat64Prefix is the well-known NAT64 prefix (RFC 6052), which embeds an IPv4
// address in its last 32 bits.
var nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")

// metadataAddrs are the cloud instance metadata addresses.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("fd00:ec2::254"),
}

// addrClass is a refused range of addresses and what to call them.
type addrClass struct {
	prefix netip.Prefix
	what   string
}

// specialClasses are the refused address classes; the first match names the class.
var specialClasses = func() []addrClass {
	const (
		unspecified = "an unspecified address"
		loopback    = "a loopback address"
		private     = "a private address"
		linkLocal   = "a link-local address"
		multicast   = "a multicast address"
		reserved    = "a reserved address"
	)
	table := []struct{ cidr, what string }{
		{"0.0.0.0/32", unspecified},
		{"::/128", unspecified},
		{"127.0.0.0/8", loopback},
		{"::1/128", loopback},
		{"0.0.0.0/8", `a "this network" address`},
		{"10.0.0.0/8", private},
		{"172.16.0.0/12", private},
		{"192.168.0.0/16", private},
		{"fc00::/7", private},
		{"169.254.0.0/16", linkLocal},
		{"fe80::/10", linkLocal},
		{"224.0.0.0/4", multicast},
		{"ff00::/8", multicast},
		{"255.255.255.255/32", "a broadcast address"},
		{"240.0.0.0/4", reserved},
		{"100.64.0.0/10", "a shared (CGNAT) address"},
		{"192.0.0.0/24", "an IETF protocol assignment address"},
		{"198.18.0.0/15", "a benchmarking address"},
		{"64:ff9b:1::/48", "a local-use NAT64 address"},
		{"::/96", reserved}, // IPv4-compatible IPv6, deprecated
	}
	out := make([]addrClass, len(table))
	for i, c := range table {
		out[i] = addrClass{netip.MustParsePrefix(c.cidr), c.what}
	}
	return out
}()
