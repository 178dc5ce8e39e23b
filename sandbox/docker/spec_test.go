package docker

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/cwsdev/cws/sandbox"
)

func TestEnv(t *testing.T) {
	tests := []struct {
		name string
		spec sandbox.Spec
		want []string
	}{
		// No network device: the agent runs the egress proxy (agent.EnvEgress).
		{"default user", sandbox.Spec{}, []string{"CWS_EGRESS=proxy", "CWS_AGENT_UID_GID=65533:65533", "CWS_UID_GID=1000:1000"}},
		{"sorted, uids last and not overridable", sandbox.Spec{User: "7:8", Env: map[string]string{"B": "2", "A": "1", "CWS_UID_GID": "0:0", "CWS_AGENT_UID_GID": "7:8"}},
			[]string{"A=1", "B=2", "CWS_EGRESS=proxy", "CWS_AGENT_UID_GID=65533:65533", "CWS_UID_GID=7:8"}},
		{"network of its own: no proxy, and the session can't ask for one", sandbox.Spec{Network: true, Env: map[string]string{"CWS_EGRESS": "proxy"}},
			[]string{"CWS_AGENT_UID_GID=65533:65533", "CWS_UID_GID=1000:1000"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := env(tc.spec); !slices.Equal(got, tc.want) {
				t.Errorf("env = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	d := &Driver{defaults: sandbox.WithDefaults(sandbox.Limits{Pids: 99}, packageDefaults), stopTimeout: DefaultStopTimeout, agentVolume: "cws-agent-x"}
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
