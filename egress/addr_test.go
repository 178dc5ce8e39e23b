package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func prefixes(t *testing.T, ss ...string) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	for _, s := range ss {
		p, err := ParsePrefix(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// checkAll asserts g.Check for each address: want is the exact error, "" for nil.
func checkAll(t *testing.T, g *Guard, tests [][2]string) {
	t.Helper()
	for _, tt := range tests {
		ip, want := netip.MustParseAddr(tt[0]), tt[1]
		err := g.Check(ip)
		switch {
		case want == "" && err != nil:
			t.Errorf("Check(%s) = %v, want nil", ip, err)
		case want != "" && err == nil:
			t.Errorf("Check(%s) = nil, want %q", ip, want)
		case want != "" && err.Error() != want:
			t.Errorf("Check(%s) = %q, want %q", ip, err, want)
		}
	}
}

func TestGuardCheck(t *testing.T) {
	checkAll(t, NewGuard(nil, nil), [][2]string{
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"93.184.216.34", ""},
		{"2606:4700:4700::1111", ""},
		{"0.0.0.0", "0.0.0.0 is an unspecified address"},
		{"::", ":: is an unspecified address"},
		{"127.0.0.1", "127.0.0.1 is a loopback address"},
		{"127.255.0.9", "127.255.0.9 is a loopback address"},
		{"::1", "::1 is a loopback address"},
		{"0.1.2.3", `0.1.2.3 is a "this network" address`},
		{"10.1.2.3", "10.1.2.3 is a private address"},
		{"172.16.0.1", "172.16.0.1 is a private address"},
		{"172.31.255.255", "172.31.255.255 is a private address"},
		{"172.32.0.1", ""},
		{"172.15.255.255", ""},
		{"192.168.1.1", "192.168.1.1 is a private address"},
		{"192.169.0.1", ""},
		{"fc00::1", "fc00::1 is a private address"},
		{"fd12:3456::1", "fd12:3456::1 is a private address"},
		{"169.254.1.1", "169.254.1.1 is a link-local address"},
		{"fe80::1", "fe80::1 is a link-local address"},
		{"fe80::1%eth0", "fe80::1 is a link-local address"},
		{"224.0.0.1", "224.0.0.1 is a multicast address"},
		{"239.255.255.250", "239.255.255.250 is a multicast address"},
		{"ff02::1", "ff02::1 is a multicast address"},
		{"255.255.255.255", "255.255.255.255 is a broadcast address"},
		{"240.0.0.1", "240.0.0.1 is a reserved address"},
		{"100.64.0.1", "100.64.0.1 is a shared (CGNAT) address"},
		{"100.127.255.255", "100.127.255.255 is a shared (CGNAT) address"},
		{"100.128.0.1", ""},
		{"192.0.0.9", "192.0.0.9 is an IETF protocol assignment address"},
		{"192.0.1.1", ""},
		{"198.18.0.1", "198.18.0.1 is a benchmarking address"},
		{"198.19.255.255", "198.19.255.255 is a benchmarking address"},
		{"198.20.0.1", ""},
		{"169.254.169.254", "169.254.169.254 is a cloud metadata address"},
		{"fd00:ec2::254", "fd00:ec2::254 is a cloud metadata address"},
		{"::7f00:1", "::7f00:1 is a reserved address"},

		// IPv4-mapped IPv6 addresses are checked as IPv4.
		{"::ffff:127.0.0.1", "127.0.0.1 is a loopback address"},
		{"::ffff:169.254.169.254", "169.254.169.254 is a cloud metadata address"},
		{"::ffff:10.0.0.1", "10.0.0.1 is a private address"},
		{"::ffff:8.8.8.8", ""},

		// NAT64 is refused when the embedded IPv4 address is.
		{"64:ff9b::808:808", ""},
		{"64:ff9b::a01:203", "64:ff9b::a01:203 is a NAT64 address of 10.1.2.3, a private address"},
		{"64:ff9b::7f00:1", "64:ff9b::7f00:1 is a NAT64 address of 127.0.0.1, a loopback address"},
		{"64:ff9b::a9fe:a9fe", "64:ff9b::a9fe:a9fe is a NAT64 address of 169.254.169.254, a cloud metadata address"},
		{"64:ff9b:1::a01:203", "64:ff9b:1::a01:203 is a local-use NAT64 address"},
	})
	if err := NewGuard(nil, nil).Check(netip.Addr{}); err == nil {
		t.Error("Check(invalid) = nil")
	}
}

func TestGuardAllowPrivate(t *testing.T) {
	g := NewGuard(
		prefixes(t, "10.0.0.0/8", "169.254.0.0/16", "fd00::/8", "::ffff:192.168.0.0/112", "127.0.0.1"),
		prefixes(t, "10.96.0.0/12", "10.0.0.1", "fd00::53"))
	checkAll(t, g, [][2]string{
		{"10.1.2.3", ""},
		{"::ffff:10.1.2.3", ""},
		{"192.168.7.7", ""}, // a mapped allowPrivate prefix covers IPv4
		{"169.254.1.1", ""},
		{"fd12::1", ""},
		{"127.0.0.1", ""},
		{"8.8.8.8", ""},
		{"127.0.0.2", "127.0.0.2 is a loopback address"},
		{"172.16.0.1", "172.16.0.1 is a private address"},
		{"fe80::1", "fe80::1 is a link-local address"},
		{"10.96.0.1", "10.96.0.1 is a denied address (in 10.96.0.0/12)"},
		{"10.0.0.1", "10.0.0.1 is a denied address (in 10.0.0.1/32)"},
		{"fd00::53", "fd00::53 is a denied address (in fd00::53/128)"},
		{"169.254.169.254", "169.254.169.254 is a cloud metadata address"},
		{"fd00:ec2::254", "fd00:ec2::254 is a cloud metadata address"},
		{"64:ff9b::a01:203", ""},
		{"64:ff9b::a60:1", "64:ff9b::a60:1 is a NAT64 address of 10.96.0.1, a denied address (in 10.96.0.0/12)"},
	})

	// Only the exact address exempts cloud metadata.
	checkAll(t, NewGuard(prefixes(t, "169.254.169.254", "fd00:ec2::254/128"), nil), [][2]string{
		{"169.254.169.254", ""},
		{"::ffff:169.254.169.254", ""},
		{"fd00:ec2::254", ""},
		{"169.254.169.253", "169.254.169.253 is a link-local address"},
		{"fd00:ec2::253", "fd00:ec2::253 is a private address"},
	})
	checkAll(t, NewGuard(prefixes(t, "169.254.169.254/32"), prefixes(t, "169.254.169.254")), [][2]string{
		{"169.254.169.254", "169.254.169.254 is a denied address (in 169.254.169.254/32)"},
	})

	// denyExtra refuses public addresses too.
	checkAll(t, NewGuard(nil, prefixes(t, "203.0.113.7")), [][2]string{
		{"203.0.113.7", "203.0.113.7 is a denied address (in 203.0.113.7/32)"},
		{"::ffff:203.0.113.7", "203.0.113.7 is a denied address (in 203.0.113.7/32)"},
		{"203.0.113.8", ""},
	})

	// Invalid prefixes are ignored rather than allowing everything.
	checkAll(t, NewGuard([]netip.Prefix{{}}, []netip.Prefix{{}}), [][2]string{
		{"10.0.0.1", "10.0.0.1 is a private address"},
		{"8.8.8.8", ""},
	})
}

func TestNilGuard(t *testing.T) {
	var g *Guard
	checkAll(t, g, [][2]string{
		{"8.8.8.8", ""},
		{"127.0.0.1", "127.0.0.1 is a loopback address"},
		{"169.254.169.254", "169.254.169.254 is a cloud metadata address"},
	})
}

func TestParsePrefix(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"10.0.0.0/8", "10.0.0.0/8"},
		{"10.1.2.3/8", "10.0.0.0/8"},
		{"10.1.2.3", "10.1.2.3/32"},
		{" 10.1.2.3 ", "10.1.2.3/32"},
		{"::1", "::1/128"},
		{"fd00::/8", "fd00::/8"},
		{"FD00:EC2::254", "fd00:ec2::254/128"},
		{"::ffff:10.1.2.3", "10.1.2.3/32"},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8"},
	} {
		p, err := ParsePrefix(tt.in)
		if err != nil || p.String() != tt.want {
			t.Errorf("ParsePrefix(%q) = %v, %v; want %s", tt.in, p, err, tt.want)
		}
	}
	for _, in := range []string{"", "10.0.0.0/33", "fd00::/129", "example.org", "10.0.0", "fe80::1%eth0", "10.0.0.0/8/9", "10.0.0.0/"} {
		_, err := ParsePrefix(in)
		if err == nil || !strings.Contains(err.Error(), "invalid") || !strings.Contains(err.Error(), `"`+strings.TrimSpace(in)+`"`) {
			t.Errorf("ParsePrefix(%q): error %v", in, err)
		}
	}
}
