package secrets

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

const testKey = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

func TestSealOpen(t *testing.T) {
	k, err := ParseKey(testKey + "\n")
	if err != nil {
		t.Fatal(err)
	}
	s := k.Seal([]byte("ghp_value"), "acme/gh")
	if bytes.Contains(s, []byte("ghp_value")) {
		t.Fatal("the sealed value holds the value")
	}
	if v, err := k.Open(s, "acme/gh"); err != nil || string(v) != "ghp_value" {
		t.Fatalf("Open = %q, %v", v, err)
	}
	if _, err := k.Open(s, "beta/gh"); !errors.Is(err, ErrKey) {
		t.Errorf("opened under another tenant's context: %v", err)
	}
	other, _ := ParseKey(strings.Repeat("ab", 32))
	if _, err := other.Open(s, "acme/gh"); !errors.Is(err, ErrKey) {
		t.Errorf("opened with another key: %v", err)
	}
	if _, err := k.Open(s[:5], "acme/gh"); !errors.Is(err, ErrKey) {
		t.Errorf("opened a truncated value: %v", err)
	}
}

func TestParseKeyRefuses(t *testing.T) {
	for _, in := range []string{"", "xyz", testKey[:62], testKey + "00", strings.Repeat("zz", 32)} {
		if _, err := ParseKey(in); err == nil || !strings.Contains(err.Error(), "32 random bytes, hex-encoded") {
			t.Errorf("ParseKey(%q) = %v", in, err)
		}
	}
}

func TestNamesAndPlaceholders(t *testing.T) {
	for name, ok := range map[string]bool{"gh-token": true, "a.b_C-9": true, strings.Repeat("a", 64): true,
		"": false, strings.Repeat("a", 65): false, "a/b": false, "a b": false, "ü": false, "a\x00": false} {
		if ValidName(name) != ok {
			t.Errorf("ValidName(%q) = %v", name, !ok)
		}
	}
	for env, ok := range map[string]bool{"GITHUB_TOKEN": true, "_x": true, "1X": false, "A-B": false, "": false, "A=B": false} {
		if ValidEnv(env) != ok {
			t.Errorf("ValidEnv(%q) = %v", env, !ok)
		}
	}
	a, b := NewPlaceholder("GITHUB_TOKEN"), NewPlaceholder("GITHUB_TOKEN")
	if a == b || !strings.HasPrefix(a, "cws-secret-GITHUB_TOKEN-") {
		t.Fatalf("placeholders %q %q", a, b)
	}
	got := FindPlaceholders("Bearer " + a + " and " + b + "x")
	if len(got) != 2 || got[0] != a || got[1] != b {
		t.Errorf("FindPlaceholders = %q", got)
	}
	if got := FindPlaceholders(strings.Replace(a, "-", "%2D", -1)); got != nil {
		t.Errorf("a percent-encoded placeholder was found: %q", got)
	}
}
