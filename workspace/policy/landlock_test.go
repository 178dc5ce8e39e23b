package policy

import "testing"

func TestRequireLandlock(t *testing.T) {
	parse := func(data string, ws bool) *Policy {
		t.Helper()
		f := Parse
		if ws {
			f = ParseWorkspace
		}
		p, err := f([]byte(data))
		if err != nil {
			t.Fatalf("parse %s: %v", data, err)
		}
		return p
	}
	for _, tc := range []struct {
		name, tenant, ws string
		want             bool
	}{
		{"unset", `{}`, ``, false},
		{"tenant", `{"requireLandlock": true}`, ``, true},
		{"tenant, workspace silent", `{"requireLandlock": true}`, `{"allowedCommands": ["git"]}`, true},
		{"workspace cannot turn it off", `{"requireLandlock": true}`, `{"requireLandlock": false}`, true},
		{"workspace turns it on", `{}`, `{"requireLandlock": true}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ws *Policy
			if tc.ws != "" {
				ws = parse(tc.ws, true)
			}
			if got := parse(tc.tenant, false).Narrow(ws).RequireLandlock(); got != tc.want {
				t.Errorf("RequireLandlock() = %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := Parse([]byte(`{"requireLandlock": "yes"}`)); err == nil {
		t.Error(`"requireLandlock": "yes" parsed`)
	}
}
