package sandbox

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	ok := Spec{Session: "s-1.a_b", Image: "img"}
	tests := []struct {
		name   string
		modify func(*Spec)
		ok     bool
	}{
		{"minimal", func(*Spec) {}, true},
		{"user", func(s *Spec) { s.User = "1001:1002" }, true},
		{"empty session", func(s *Spec) { s.Session = "" }, false},
		{"session with slash", func(s *Spec) { s.Session = "a/b" }, false},
		{"session leading dash", func(s *Spec) { s.Session = "-a" }, false},
		{"session too long", func(s *Spec) { s.Session = strings.Repeat("a", 129) }, false},
		{"no image", func(s *Spec) { s.Image = "" }, false},
		{"user name", func(s *Spec) { s.User = "cws" }, false},
		{"root uid", func(s *Spec) { s.User = "0:1000" }, false},
		{"root gid", func(s *Spec) { s.User = "1000:0" }, false},
		{"the agent's uid", func(s *Spec) { s.User = "65533:1000" }, false},
		{"the agent's gid", func(s *Spec) { s.User = "1000:65533" }, false},
		{"root uid, padded", func(s *Spec) { s.User = "00:1000" }, false},
		{"uid too large", func(s *Spec) { s.User = "9999999999:1" }, false},
		{"uid 10", func(s *Spec) { s.User = "10:10" }, true},
		{"user uid only", func(s *Spec) { s.User = "1000" }, false},
		{"env name with =", func(s *Spec) { s.Env = map[string]string{"A=B": "c"} }, false},
		{"empty env name", func(s *Spec) { s.Env = map[string]string{"": "c"} }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.modify(&s)
			err := Validate(s)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
				t.Errorf("validate = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestLabels(t *testing.T) {
	exp := time.Date(2030, 1, 2, 3, 4, 5, 600, time.FixedZone("x", 3600))
	tests := []struct {
		name string
		spec Spec
		want map[string]string
	}{
		{
			name: "no expiry",
			spec: Spec{Session: "s", Tenant: "t", Subject: "ci", Image: "img:1"},
			want: map[string]string{"cws.managed": "true", "cws.instance": "i1", "cws.session": "s", "cws.tenant": "t", "cws.sub": "ci", "cws.image": "img:1", "cws.expires": ""},
		},
		{
			name: "expiry in UTC, extra labels, cws.* reserved",
			spec: Spec{Session: "s", Tenant: "t", Expires: exp, Labels: map[string]string{
				"team": "a", "cws.managed": "false", "cws.session": "evil", "cws.agent": "x",
			}},
			want: map[string]string{"cws.managed": "true", "cws.instance": "i1", "cws.session": "s", "cws.tenant": "t", "cws.sub": "", "cws.image": "", "cws.expires": "2030-01-02T02:04:05Z", "team": "a"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Labels(tc.spec, "i1"); !maps.Equal(got, tc.want) {
				t.Errorf("labels = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	def := Limits{NanoCPUs: 1, MemoryBytes: 2, Pids: 3, NoFile: 4, FileSizeBytes: 5, TmpSizeBytes: 6}
	tests := []struct {
		name string
		in   Limits
		want Limits
	}{
		{"all zero", Limits{}, def},
		{"some set", Limits{Pids: 30, TmpSizeBytes: 60}, Limits{NanoCPUs: 1, MemoryBytes: 2, Pids: 30, NoFile: 4, FileSizeBytes: 5, TmpSizeBytes: 60}},
		{"negative is default", Limits{MemoryBytes: -1}, def},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := WithDefaults(tc.in, def); got != tc.want {
				t.Errorf("withDefaults = %+v, want %+v", got, tc.want)
			}
		})
	}
}
