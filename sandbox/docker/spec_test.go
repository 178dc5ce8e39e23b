package docker

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox"
)

func TestValidate(t *testing.T) {
	ok := sandbox.Spec{Session: "s-1.a_b", Image: "img"}
	tests := []struct {
		name   string
		modify func(*sandbox.Spec)
		ok     bool
	}{
		{"minimal", func(*sandbox.Spec) {}, true},
		{"user", func(s *sandbox.Spec) { s.User = "1001:1002" }, true},
		{"empty session", func(s *sandbox.Spec) { s.Session = "" }, false},
		{"session with slash", func(s *sandbox.Spec) { s.Session = "a/b" }, false},
		{"session leading dash", func(s *sandbox.Spec) { s.Session = "-a" }, false},
		{"session too long", func(s *sandbox.Spec) { s.Session = strings.Repeat("a", 129) }, false},
		{"no image", func(s *sandbox.Spec) { s.Image = "" }, false},
		{"user name", func(s *sandbox.Spec) { s.User = "cws" }, false},
		{"root uid", func(s *sandbox.Spec) { s.User = "0:1000" }, false},
		{"root gid", func(s *sandbox.Spec) { s.User = "1000:0" }, false},
		{"the agent's uid", func(s *sandbox.Spec) { s.User = "65533:1000" }, false},
		{"the agent's gid", func(s *sandbox.Spec) { s.User = "1000:65533" }, false},
		{"root uid, padded", func(s *sandbox.Spec) { s.User = "00:1000" }, false},
		{"uid too large", func(s *sandbox.Spec) { s.User = "9999999999:1" }, false},
		{"uid 10", func(s *sandbox.Spec) { s.User = "10:10" }, true},
		{"user uid only", func(s *sandbox.Spec) { s.User = "1000" }, false},
		{"env name with =", func(s *sandbox.Spec) { s.Env = map[string]string{"A=B": "c"} }, false},
		{"empty env name", func(s *sandbox.Spec) { s.Env = map[string]string{"": "c"} }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.modify(&s)
			err := validate(s)
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
		spec sandbox.Spec
		want map[string]string
	}{
		{
			name: "no expiry",
			spec: sandbox.Spec{Session: "s", Tenant: "t", Subject: "ci", Image: "img:1"},
			want: map[string]string{"cws.managed": "true", "cws.session": "s", "cws.tenant": "t", "cws.sub": "ci", "cws.image": "img:1", "cws.expires": ""},
		},
		{
			name: "expiry in UTC, extra labels, cws.* reserved",
			spec: sandbox.Spec{Session: "s", Tenant: "t", Expires: exp, Labels: map[string]string{
				"team": "a", "cws.managed": "false", "cws.session": "evil", "cws.agent": "x",
			}},
			want: map[string]string{"cws.managed": "true", "cws.session": "s", "cws.tenant": "t", "cws.sub": "", "cws.image": "", "cws.expires": "2030-01-02T02:04:05Z", "team": "a"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := labels(tc.spec); !maps.Equal(got, tc.want) {
				t.Errorf("labels = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEnv(t *testing.T) {
	tests := []struct {
		name string
		spec sandbox.Spec
		want []string
	}{
		{"default user", sandbox.Spec{}, []string{"CWS_AGENT_UID_GID=65533:65533", "CWS_UID_GID=1000:1000"}},
		{"sorted, uids last and not overridable", sandbox.Spec{User: "7:8", Env: map[string]string{"B": "2", "A": "1", "CWS_UID_GID": "0:0", "CWS_AGENT_UID_GID": "7:8"}},
			[]string{"A=1", "B=2", "CWS_AGENT_UID_GID=65533:65533", "CWS_UID_GID=7:8"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := env(tc.spec); !slices.Equal(got, tc.want) {
				t.Errorf("env = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	def := sandbox.Limits{NanoCPUs: 1, MemoryBytes: 2, Pids: 3, NoFile: 4, FileSizeBytes: 5, TmpSizeBytes: 6}
	tests := []struct {
		name string
		in   sandbox.Limits
		want sandbox.Limits
	}{
		{"all zero", sandbox.Limits{}, def},
		{"some set", sandbox.Limits{Pids: 30, TmpSizeBytes: 60}, sandbox.Limits{NanoCPUs: 1, MemoryBytes: 2, Pids: 30, NoFile: 4, FileSizeBytes: 5, TmpSizeBytes: 60}},
		{"negative is default", sandbox.Limits{MemoryBytes: -1}, def},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := withDefaults(tc.in, def); got != tc.want {
				t.Errorf("withDefaults = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	d := &Driver{defaults: withDefaults(sandbox.Limits{Pids: 99}, packageDefaults), stopTimeout: DefaultStopTimeout, agentVolume: "cws-agent-x"}
	cfg, host := d.containerConfig(sandbox.Spec{Session: "s", Image: "img", Network: true}, socketSetup{})
	if *host.PidsLimit != 99 || host.Memory != 1<<30 || host.MemorySwap != 1<<30 || host.NanoCPUs != 1e9 {
		t.Errorf("resources = %+v", host.Resources)
	}
	if host.NetworkMode != "bridge" || *cfg.StopTimeout != 5 || host.Tmpfs["/tmp"] != "rw,exec,nosuid,nodev,size=268435456" {
		t.Errorf("network %q, stop %d, tmpfs %q", host.NetworkMode, *cfg.StopTimeout, host.Tmpfs["/tmp"])
	}
}

func TestLogWriter(t *testing.T) {
	tests := []struct {
		name    string
		writes  []string
		want    []string // logged lines
		dropped bool
	}{
		{"lines split across writes", []string{"ab", "c\nde", "f\n", "g"}, []string{"abc", "def", "g"}, false},
		{"long line cut", []string{strings.Repeat("x", 2*logLineMax) + "\n"}, []string{strings.Repeat("x", logLineMax)}, false},
		{"total bounded", slices.Repeat([]string{strings.Repeat("y", logLineMax-1) + "\n"}, 2*logTotalMax/logLineMax),
			slices.Repeat([]string{strings.Repeat("y", logLineMax-1)}, logTotalMax/logLineMax), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &recorder{}
			w := newLogWriter(slog.New(h), "m")
			for _, s := range tc.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			w.Flush()
			if !slices.Equal(h.lines, tc.want) {
				t.Errorf("logged %d lines %.80q, want %d %.80q", len(h.lines), h.lines, len(tc.want), tc.want)
			}
			if h.dropped != tc.dropped {
				t.Errorf("dropped reported = %v, want %v", h.dropped, tc.dropped)
			}
		})
	}
}

// recorder is a slog.Handler that keeps the "line" attributes it sees.
type recorder struct {
	lines   []string
	dropped bool
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	rec.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "line":
			r.lines = append(r.lines, a.Value.String())
		case "dropped_bytes":
			r.dropped = true
		}
		return true
	})
	return nil
}
