package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func mustRules(t *testing.T, allow, deny []string) Rules {
	t.Helper()
	r, err := ParseRules(allow, deny)
	if err != nil {
		t.Fatalf("ParseRules(%q, %q): %v", allow, deny, err)
	}
	return r
}

func TestParseRulesAccepts(t *testing.T) {
	entries := []string{
		"example.org", "Example.ORG.", "a.b.c.example.org", "*.example.org", "*.com",
		"example.org:443", "*.example.org:8443", "localhost", "_acme.example.org", "xn--bcher-kva.example",
		"a-b.example.org", "1.2.3.4", "1.2.3.4:8080", "1.2.3.4.", "2001:db8::1", "2001:DB8::1",
		"[2001:db8::1]", "[2001:db8::1]:443", "::ffff:1.2.3.4", "10.0.0.0/8", "10.1.2.3/8",
		"fd00::/8", "0.0.0.0/0", "::/0", "@go", "@npm", "@pypi", "@github", "@debian", "@GO",
		strings.Repeat("a", 63) + ".org", "x.org:1", "x.org:65535",
		strings.Repeat("a.", 126) + "a", // 253 characters
	}
	for _, e := range entries {
		if _, err := ParseRules([]string{e}, []string{e}); err != nil {
			t.Errorf("ParseRules(%q): %v", e, err)
		}
	}
}

func TestParseRulesRejects(t *testing.T) {
	long := strings.Repeat("a.", 126) + "ab" // 254 characters
	tests := []struct {
		entry string
		want  string // in the message, after the entry
	}{
		{"", "empty entry"},
		{"*", `a wildcard is only allowed as a leading "*." label`},
		{"*.", `a wildcard is only allowed as a leading "*." label`},
		{"**.com", `a wildcard is only allowed as a leading "*." label`},
		{"a.*.com", `a wildcard is only allowed as a leading "*." label`},
		{"*.*.com", `a wildcard is only allowed as a leading "*." label`},
		{"a*.com", `a wildcard is only allowed as a leading "*." label`},
		{"http://x", "a URL is not allowed"},
		{"https://example.org/path", "a URL is not allowed"},
		{"example.org/path", "a path is not allowed"},
		{"/8", "a path is not allowed"},
		{"user@example.org", `"@" is only allowed at the start of a preset`},
		{"300.1.1.1", "not a valid IP address"},
		{"1.2.3", "not a valid IP address"},
		{"123", "not a valid IP address"},
		{"1.2.3.4.5:80", "not a valid IP address"},
		{"*.1.2.3.4", "a wildcard must be followed by a host name"},
		{"example.org:0", "port 0 out of range"},
		{"example.org:65536", "port 65536 out of range"},
		{"example.org:99999999999999999999", "port 99999999999999999999 out of range (1-65535)"},
		{"example.org:http", `invalid port "http"`},
		{"example.org:-1", `invalid port "-1"`},
		{"example.org:", `invalid port ""`},
		{"[2001:db8::1]:", `invalid port ""`},
		{":443", "empty host"},
		{"@foo", "unknown preset (known: @debian, @github, @go, @npm, @pypi)"},
		{"@", "unknown preset"},
		{strings.Repeat("a", 64) + ".org", "label longer than 63 characters"},
		{long, "name longer than 253 characters"},
		{"exa mple.org", "spaces"},
		{" example.org", "spaces"},
		{"example.org\n", "spaces"},
		{"ex!ample.org", `invalid character '!'`},
		{"exämple.org", `invalid character 'ä'`},
		{"a:b:c", `invalid character ':'`},
		{"-a.org", "a label may not start or end with a hyphen"},
		{"a-.org", "a label may not start or end with a hyphen"},
		{"a..b", "empty label"},
		{".example.org", "empty label"},
		{"*..", "empty host name"},
		{"10.0.0.0/33", "invalid CIDR"},
		{"fd00::/129", "invalid CIDR"},
		{"10.0.0.0/8:443", "invalid CIDR"},
		{"[1.2.3.4]:80", "brackets are only for IPv6 addresses"},
		{"[example.org]:80", "brackets are only for IPv6 addresses"},
		{"[::1", `missing "]"`},
		{"[::1]443", `unexpected text after "]"`},
		{"fe80::1%eth0", "an IPv6 zone is not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.entry, func(t *testing.T) {
			for _, list := range []string{"allow", "deny"} {
				entries := []string{"ok.example.org", "@go", tt.entry}
				var err error
				if list == "allow" {
					_, err = ParseRules(entries, nil)
				} else {
					_, err = ParseRules(nil, entries)
				}
				if err == nil {
					t.Fatalf("%s %q: no error", list, tt.entry)
				}
				want := fmt.Sprintf("%s[2] %q: %s", list, tt.entry, tt.want)
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: error %q, want it to contain %q", list, err, want)
				}
			}
		})
	}
}

func TestParseRulesTooMany(t *testing.T) {
	max := make([]string, MaxEntries)
	for i := range max {
		max[i] = fmt.Sprintf("h%d.example.org", i)
	}
	if _, err := ParseRules(max, max); err != nil {
		t.Fatalf("%d entries: %v", MaxEntries, err)
	}
	over := append(max, "one-more.example.org")
	_, err := ParseRules(nil, over)
	if err == nil || err.Error() != "deny: too many entries (1025; at most 1024)" {
		t.Errorf("1025 deny entries: error %v", err)
	}
	_, err = ParseRules(over, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "allow: too many entries") {
		t.Errorf("1025 allow entries: error %v", err)
	}
}

func TestAllows(t *testing.T) {
	tests := []struct {
		name        string
		allow, deny []string
		host        string
		port        int
		ok          bool
		rule        string // exact refusal, when set
	}{
		// Exact names.
		{"exact", []string{"example.org"}, nil, "example.org", 443, true, ""},
		{"exact any port", []string{"example.org"}, nil, "example.org", 22, true, ""},
		{"exact not subdomain", []string{"example.org"}, nil, "a.example.org", 443, false, "a.example.org is not in the allow list"},
		{"exact not suffix", []string{"example.org"}, nil, "badexample.org", 443, false, "badexample.org is not in the allow list"},
		{"exact not prefix", []string{"example.org"}, nil, "example.org.evil.com", 443, false, ""},
		{"not listed", []string{"example.com"}, nil, "example.org", 443, false, "example.org is not in the allow list"},

		// Case and trailing dots.
		{"case of host", []string{"example.org"}, nil, "EXAMPLE.Org", 443, true, ""},
		{"case of entry", []string{"EXAMPLE.org"}, nil, "example.org", 443, true, ""},
		{"trailing dot of host", []string{"example.org"}, nil, "example.org.", 443, true, ""},
		{"trailing dot of entry", []string{"example.org."}, nil, "example.org", 443, true, ""},
		{"wildcard case and dot", []string{"*.Example.ORG."}, nil, "A.B.example.org.", 443, true, ""},

		// Wildcards.
		{"wildcard one deep", []string{"*.example.org"}, nil, "a.example.org", 443, true, ""},
		{"wildcard two deep", []string{"*.example.org"}, nil, "a.b.example.org", 443, true, ""},
		{"wildcard not apex", []string{"*.example.org"}, nil, "example.org", 443, false, "example.org is not in the allow list"},
		{"wildcard not suffix", []string{"*.example.org"}, nil, "badexample.org", 443, false, ""},
		{"wildcard not other", []string{"*.example.org"}, nil, "example.org.evil.com", 443, false, ""},
		{"wildcard under tld", []string{"*.com"}, nil, "x.y.com", 443, true, ""},
		{"wildcard under tld not org", []string{"*.com"}, nil, "x.org", 443, false, ""},
		{"wildcard and apex", []string{"example.org", "*.example.org"}, nil, "example.org", 443, true, ""},

		// Ports.
		{"port match", []string{"example.org:443"}, nil, "example.org", 443, true, ""},
		{"port mismatch", []string{"example.org:443"}, nil, "example.org", 80, false, "example.org:80 is not in the allow list"},
		{"wildcard port", []string{"*.example.org:8443"}, nil, "a.example.org", 8443, true, ""},
		{"wildcard port mismatch", []string{"*.example.org:8443"}, nil, "a.example.org", 443, false, "a.example.org:443 is not in the allow list"},
		{"two ports", []string{"example.org:80", "example.org:443"}, nil, "example.org", 80, true, ""},

		// IP literals and CIDRs.
		{"ipv4", []string{"1.2.3.4"}, nil, "1.2.3.4", 22, true, ""},
		{"ipv4 other", []string{"1.2.3.4"}, nil, "1.2.3.5", 22, false, "1.2.3.5 is not in the allow list"},
		{"ipv4 port", []string{"1.2.3.4:8080"}, nil, "1.2.3.4", 8080, true, ""},
		{"ipv4 port mismatch", []string{"1.2.3.4:8080"}, nil, "1.2.3.4", 80, false, "1.2.3.4:80 is not in the allow list"},
		{"ipv6", []string{"2001:db8::1"}, nil, "2001:db8::1", 443, true, ""},
		{"ipv6 case", []string{"2001:DB8::1"}, nil, "2001:db8:0::1", 443, true, ""},
		{"ipv6 bracketed entry", []string{"[2001:db8::1]:443"}, nil, "2001:db8::1", 443, true, ""},
		{"ipv6 bracketed host", []string{"[2001:db8::1]:443"}, nil, "[2001:db8::1]", 443, true, ""},
		{"ipv6 port mismatch", []string{"[2001:db8::1]:443"}, nil, "2001:db8::1", 80, false, "[2001:db8::1]:80 is not in the allow list"},
		{"cidr", []string{"10.0.0.0/8"}, nil, "10.200.3.4", 443, true, ""},
		{"cidr outside", []string{"10.0.0.0/8"}, nil, "11.0.0.1", 443, false, "11.0.0.1 is not in the allow list"},
		{"cidr host bits", []string{"10.1.2.3/8"}, nil, "10.9.9.9", 443, true, ""},
		{"cidr v6", []string{"fd00::/8"}, nil, "fd12:3456::1", 443, true, ""},
		{"cidr v6 outside", []string{"fd00::/8"}, nil, "fe80::1", 443, false, ""},
		{"mapped host", []string{"10.0.0.0/8"}, nil, "::ffff:10.1.2.3", 443, true, ""},
		{"mapped entry", []string{"::ffff:1.2.3.4"}, nil, "1.2.3.4", 443, true, ""},
		{"v4 cidr not v6", []string{"0.0.0.0/0"}, nil, "2001:db8::1", 443, false, ""},

		// A name never matches an IP entry, nor an IP a name entry.
		{"ip entry, name host", []string{"1.2.3.4", "0.0.0.0/0"}, nil, "example.org", 443, false, "example.org is not in the allow list"},
		{"name entry, ip host", []string{"*.com", "localhost", "example.org"}, nil, "127.0.0.1", 443, false, "127.0.0.1 is not in the allow list"},

		// Deny wins.
		{"deny exact", []string{"*.example.org"}, []string{"secret.example.org"}, "secret.example.org", 443, false,
			`secret.example.org:443 is denied by "secret.example.org"`},
		{"deny other passes", []string{"*.example.org"}, []string{"secret.example.org"}, "public.example.org", 443, true, ""},
		{"deny wildcard port", []string{"*.example.org"}, []string{"*.example.org:22"}, "a.example.org", 22, false,
			`a.example.org:22 is denied by "*.example.org:22"`},
		{"deny wildcard other port", []string{"*.example.org"}, []string{"*.example.org:22"}, "a.example.org", 443, true, ""},
		{"deny same entry", []string{"example.org"}, []string{"example.org"}, "example.org", 443, false,
			`example.org:443 is denied by "example.org"`},
		{"deny as written", []string{"example.org"}, []string{"Example.ORG."}, "example.org", 80, false,
			`example.org:80 is denied by "Example.ORG."`},
		{"deny ip", []string{"10.0.0.0/8"}, []string{"10.0.0.1"}, "10.0.0.1", 443, false, `10.0.0.1:443 is denied by "10.0.0.1"`},
		{"deny cidr v6", []string{"::/0"}, []string{"2001:db8::/32"}, "2001:db8::5", 443, false,
			`[2001:db8::5]:443 is denied by "2001:db8::/32"`},
		{"deny without allow", nil, []string{"example.org"}, "example.org", 443, false, `example.org:443 is denied by "example.org"`},
		{"deny preset", []string{"*.com"}, []string{"@github"}, "api.github.com", 443, false,
			`api.github.com:443 is denied by "*.github.com:443" (from "@github")`},
		{"deny name, ip host", []string{"0.0.0.0/0"}, []string{"*.com"}, "1.2.3.4", 443, true, ""},

		// Presets.
		{"go proxy", []string{"@go"}, nil, "proxy.golang.org", 443, true, ""},
		{"go wildcard", []string{"@go"}, nil, "x.golang.org", 443, true, ""},
		{"go storage", []string{"@go"}, nil, "storage.googleapis.com", 443, true, ""},
		{"go port 80", []string{"@go"}, nil, "proxy.golang.org", 80, false, "proxy.golang.org:80 is not in the allow list"},
		{"go not github", []string{"@go"}, nil, "github.com", 443, false, "github.com is not in the allow list"},
		{"go not googleapis", []string{"@go"}, nil, "www.googleapis.com", 443, false, ""},
		{"preset case", []string{"@Go"}, nil, "go.dev", 443, true, ""},
		{"npm", []string{"@npm"}, nil, "registry.npmjs.org", 443, true, ""},
		{"yarn", []string{"@npm"}, nil, "registry.yarnpkg.com", 443, true, ""},
		{"pypi", []string{"@pypi"}, nil, "files.pythonhosted.org", 443, true, ""},
		{"github raw", []string{"@github"}, nil, "raw.githubusercontent.com", 443, true, ""},
		{"github apex", []string{"@github"}, nil, "github.com", 443, true, ""},
		{"github ssh", []string{"@github"}, nil, "github.com", 22, false, "github.com:22 is not in the allow list"},
		{"ghcr", []string{"@github"}, nil, "ghcr.io", 443, true, ""},
		{"debian 80", []string{"@debian"}, nil, "deb.debian.org", 80, true, ""},
		{"debian 443", []string{"@debian"}, nil, "security.debian.org", 443, true, ""},
		{"debian mirror", []string{"@debian"}, nil, "ftp.debian.org", 80, true, ""},
		{"debian 22", []string{"@debian"}, nil, "deb.debian.org", 22, false, ""},
		{"presets combine", []string{"@go", "@npm"}, nil, "registry.npmjs.org", 443, true, ""},

		// Nothing allowed, bad queries.
		{"empty allow", nil, nil, "example.org", 443, false, "example.org is not allowed: the allow list is empty"},
		{"empty host", []string{"*.com"}, nil, "", 443, false, `"" is not a valid host name or IP address`},
		{"bad host", []string{"*.com"}, nil, "a..b.com", 443, false, `"a..b.com" is not a valid host name or IP address`},
		{"host with slash", []string{"*.com"}, nil, "x/y.com", 443, false, ""},
		{"numeric host", []string{"0.0.0.0/0"}, nil, "127.1", 443, false, `"127.1" is not a valid host name or IP address`},
		{"port 0", []string{"example.org"}, nil, "example.org", 0, false, "port 0 is out of range"},
		{"port too big", []string{"example.org"}, nil, "example.org", 65536, false, "port 65536 is out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRules(t, tt.allow, tt.deny)
			ok, rule := r.Allows(tt.host, tt.port)
			if ok != tt.ok {
				t.Fatalf("Allows(%q, %d) = %v (%q), want %v", tt.host, tt.port, ok, rule, tt.ok)
			}
			if ok && rule != "" {
				t.Errorf("allowed with rule %q", rule)
			}
			if !ok && rule == "" {
				t.Errorf("refused without a rule")
			}
			if tt.rule != "" && rule != tt.rule {
				t.Errorf("rule %q, want %q", rule, tt.rule)
			}
		})
	}
}

// Every host of every preset is allowed by the preset, and only on its ports.
func TestPresets(t *testing.T) {
	if len(Presets) != 5 {
		t.Errorf("%d presets, want 5", len(Presets))
	}
	for name, entries := range Presets {
		r := mustRules(t, []string{name}, nil)
		if a, _ := r.Strings(); !slices.Equal(a, []string{name}) {
			t.Errorf("%s: Strings() = %q", name, a)
		}
		for _, e := range entries {
			host, port, _ := strings.Cut(e, ":")
			host = strings.Replace(host, "*.", "x.", 1)
			if ok, rule := r.Allows(host, atoi(t, port)); !ok {
				t.Errorf("%s does not allow %s: %s", name, e, rule)
			}
			if ok, _ := r.Allows(host, 8080); ok {
				t.Errorf("%s allows %s on port 8080", name, host)
			}
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("port %q: %v", s, err)
	}
	return n
}

func TestDeniesIP(t *testing.T) {
	r := mustRules(t,
		[]string{"example.org", "1.2.3.4"},
		[]string{"10.0.0.0/8", "example.net", "*.example.com", "192.168.1.1:22", "[2001:db8::1]:443", "@debian"})
	tests := []struct {
		ip     string
		port   int
		denied bool
		rule   string
	}{
		{"10.1.2.3", 443, true, `10.1.2.3:443 is denied by "10.0.0.0/8"`},
		{"::ffff:10.1.2.3", 80, true, `10.1.2.3:80 is denied by "10.0.0.0/8"`},
		{"192.168.1.1", 22, true, `192.168.1.1:22 is denied by "192.168.1.1:22"`},
		{"192.168.1.1", 80, false, ""},
		{"2001:db8::1", 443, true, `[2001:db8::1]:443 is denied by "[2001:db8::1]:443"`},
		{"2001:db8::1", 80, false, ""},
		{"8.8.8.8", 443, false, ""}, // not in allow: allow entries are not consulted
		{"1.2.3.4", 443, false, ""},
	}
	for _, tt := range tests {
		denied, rule := r.DeniesIP(netip.MustParseAddr(tt.ip), tt.port)
		if denied != tt.denied || rule != tt.rule {
			t.Errorf("DeniesIP(%s, %d) = %v, %q; want %v, %q", tt.ip, tt.port, denied, rule, tt.denied, tt.rule)
		}
	}
	if denied, _ := r.DeniesIP(netip.Addr{}, 443); !denied {
		t.Error("an invalid address is not denied")
	}
	if denied, _ := (Rules{}).DeniesIP(netip.MustParseAddr("10.0.0.1"), 443); denied {
		t.Error("the zero Rules denies an address")
	}
}

func TestNarrow(t *testing.T) {
	tenant := mustRules(t,
		[]string{"*.example.org", "10.0.0.0/8", "other.org"},
		[]string{"bad.example.org"})
	ws := mustRules(t,
		[]string{"a.example.org", "bad.example.org", "c.example.org", "b.elsewhere.org", "10.1.0.0/16", "other.org:443"},
		[]string{"10.1.2.3", "c.example.org"})
	n := tenant.Narrow(ws)

	tests := []struct {
		host string
		port int
		ok   bool
		rule string
	}{
		{"a.example.org", 443, true, ""},
		{"a.example.org", 22, true, ""},
		{"z.example.org", 443, false, "z.example.org is not in the allow list"},               // not in ws
		{"b.elsewhere.org", 443, false, "b.elsewhere.org is not in the allow list"},           // not in tenant
		{"bad.example.org", 443, false, `bad.example.org:443 is denied by "bad.example.org"`}, // tenant denies
		{"c.example.org", 443, false, `c.example.org:443 is denied by "c.example.org"`},       // ws denies
		{"other.org", 443, true, ""},
		{"other.org", 80, false, "other.org:80 is not in the allow list"},
		{"10.1.5.5", 443, true, ""},
		{"10.2.0.1", 443, false, "10.2.0.1 is not in the allow list"},
		{"10.1.2.3", 443, false, `10.1.2.3:443 is denied by "10.1.2.3"`},
	}
	for _, tt := range tests {
		ok, rule := n.Allows(tt.host, tt.port)
		if ok != tt.ok || rule != tt.rule {
			t.Errorf("narrowed Allows(%s, %d) = %v, %q; want %v, %q", tt.host, tt.port, ok, rule, tt.ok, tt.rule)
		}
	}
	if denied, _ := n.DeniesIP(netip.MustParseAddr("10.1.2.3"), 443); !denied {
		t.Error("narrowed DeniesIP does not use the workspace's deny list")
	}

	// Narrowing again narrows further.
	n2 := n.Narrow(mustRules(t, []string{"a.example.org:443", "10.0.0.0/8"}, []string{"10.1.9.9"}))
	for _, tt := range []struct {
		host string
		port int
		ok   bool
	}{
		{"a.example.org", 443, true},
		{"a.example.org", 22, false},
		{"bad.example.org", 443, false},
		{"10.1.5.5", 443, true},
		{"10.2.0.1", 443, false}, // the middle list still applies
		{"10.1.9.9", 443, false},
		{"10.1.2.3", 443, false},
	} {
		if ok, rule := n2.Allows(tt.host, tt.port); ok != tt.ok {
			t.Errorf("twice narrowed Allows(%s, %d) = %v (%q), want %v", tt.host, tt.port, ok, rule, tt.ok)
		}
	}

	// The inputs are unchanged.
	if ok, _ := tenant.Allows("z.example.org", 443); !ok {
		t.Error("Narrow changed the tenant's rules")
	}
	if ok, _ := ws.Allows("10.1.2.3", 443); ok {
		t.Error("the workspace's rules allow what they deny")
	}

	a, d := n.Strings()
	if !slices.Equal(a, []string{"a.example.org", "bad.example.org", "c.example.org", "b.elsewhere.org", "10.1.0.0/16", "other.org:443"}) {
		t.Errorf("narrowed allow strings %q", a)
	}
	if !slices.Equal(d, []string{"bad.example.org", "10.1.2.3", "c.example.org"}) {
		t.Errorf("narrowed deny strings %q", d)
	}

	// Narrowing by or of rules that allow nothing allows nothing.
	for name, e := range map[string]Rules{
		"tenant by zero":  tenant.Narrow(Rules{}),
		"zero by ws":      Rules{}.Narrow(ws),
		"tenant by empty": tenant.Narrow(mustRules(t, nil, []string{"x.org"})),
	} {
		if !e.Empty() {
			t.Errorf("%s: not Empty", name)
		}
		if ok, _ := e.Allows("a.example.org", 443); ok {
			t.Errorf("%s: allows a.example.org", name)
		}
		if a, _ := e.Strings(); len(a) != 0 {
			t.Errorf("%s: allow strings %q", name, a)
		}
	}
	_, d = tenant.Narrow(mustRules(t, nil, []string{"x.org"})).Strings()
	if !slices.Equal(d, []string{"bad.example.org", "x.org"}) {
		t.Errorf("deny strings of an empty narrowing %q", d)
	}
}

func TestEmptyAndStrings(t *testing.T) {
	if !(Rules{}).Empty() {
		t.Error("zero Rules is not Empty")
	}
	if !mustRules(t, nil, []string{"example.org"}).Empty() {
		t.Error("rules with only a deny list are not Empty")
	}
	if !mustRules(t, []string{}, nil).Empty() {
		t.Error("rules with an empty allow list are not Empty")
	}
	if mustRules(t, []string{"@go"}, nil).Empty() {
		t.Error("rules allowing @go are Empty")
	}

	allow := []string{"@go", "Example.ORG.", "[2001:db8::1]:443"}
	deny := []string{"10.0.0.0/8"}
	r := mustRules(t, allow, deny)
	allow[0] = "changed" // ParseRules keeps its own copy
	a, d := r.Strings()
	if !slices.Equal(a, []string{"@go", "Example.ORG.", "[2001:db8::1]:443"}) || !slices.Equal(d, deny) {
		t.Errorf("Strings() = %q, %q", a, d)
	}
	a[0] = "changed" // and returns a copy
	if a, _ := r.Strings(); a[0] != "@go" {
		t.Errorf("Strings() returned its own slice")
	}
	if a, d := (Rules{}).Strings(); a != nil || d != nil {
		t.Errorf("zero Rules Strings() = %q, %q", a, d)
	}
}
