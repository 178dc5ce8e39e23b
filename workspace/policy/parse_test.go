package policy

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// seedExample is the policy file from seeds/coding-environment-tools.md.
const seedExample = `{
  "allowedPaths": ["**/*"],
  "deniedPaths": [".git/**", "node_modules/**"],
  "maxFileSize": 10485760,
  "maxEditSize": 1048576,
  "allowedCommands": ["python3", "npm", "make"],
  "envAllowlist": ["PATH", "HOME"],
  "confirmationRequired": ["runCommand"]
}`

func TestParse(t *testing.T) {
	tests := []struct {
		name      string
		data      string
		workspace bool
		wantErr   string // substring; "" means success
	}{
		{"seed example", seedExample, false, ""},
		{"seed example in a workspace", seedExample, true, ""},
		{"empty object", `{}`, false, ""},
		{"tenant fields", `{"limits":{"cpus":1.5,"memoryMB":2048,"pids":256,"diskMB":4096,"nofile":1024,"fileSizeMB":100},
			"sessionTTL":"30m","maxLifetime":"24h","maxSessions":10,"images":["cws/workspace:1"],
			"network":true,"toolsets":["core","lsp"],"rate":{"perSecond":5,"burst":10},"allowPolicyWrites":true}`, false, ""},
		{"unknown field", `{"maxFileSzie": 1}`, false, `unknown field "maxFileSzie" in .cws-policy.json`},
		{"unknown field in workspace", `{"maxFileSzie": 1}`, true, `unknown field "maxFileSzie" in .cws-policy.json`},
		{"wrong case", `{"AllowedPaths": ["**"]}`, false, `unknown field "AllowedPaths"`},
		{"unknown nested field", `{"limits": {"cpu": 1}}`, false, `unknown field "limits.cpu"`},
		{"duplicate field", `{"allowedPaths": ["src/**"], "allowedPaths": ["**"]}`, true, `field "allowedPaths" appears twice`},
		{"trailing object", `{} {}`, false, "trailing data"},
		{"trailing garbage", `{"maxFileSize": 1}x`, false, "trailing data"},
		{"not an object", `[]`, false, "must be a JSON object"},
		{"null", `null`, false, "must be a JSON object"},
		{"empty input", ``, false, "must be a JSON object"},
		{"truncated", `{"maxFileSize": 1`, false, ".cws-policy.json"},
		{"wrong type", `{"maxFileSize": "10MB"}`, false, "maxFileSize"},
		{"negative maxFileSize", `{"maxFileSize": -1}`, false, "maxFileSize must not be negative"},
		{"negative maxEditSize", `{"maxEditSize": -1}`, true, "maxEditSize must not be negative"},
		{"negative limit", `{"limits": {"pids": -1}}`, false, "limits must not be negative"},
		{"negative duration", `{"sessionTTL": "-1m"}`, false, "sessionTTL must not be negative"},
		{"negative maxTerminals", `{"maxTerminals": -1}`, false, "maxTerminals must not be negative"},
		{"negative terminalIdle", `{"terminalIdle": "-5m"}`, false, "terminalIdle must not be negative"},
		{"terminal fields are tenant-only", `{"maxTerminals": 2}`, true, `"maxTerminals"`},
		{"numeric duration", `{"sessionTTL": 60}`, false, "duration must be a string"},
		{"invalid allowed glob", `{"allowedPaths": ["src/[a"]}`, false, "allowedPaths[0]"},
		{"invalid denied glob", `{"deniedPaths": ["ok", "/etc/**"]}`, true, "deniedPaths[1]"},
		{"unclean glob", `{"deniedPaths": ["node_modules/"]}`, true, `write "node_modules"`},
		{"command with a path", `{"allowedCommands": ["/usr/bin/python3"]}`, true, "allowedCommands[0]"},
		{"command with args", `{"allowedCommands": ["python3 -m"]}`, false, "arguments go in args"},
		{"bad env entry", `{"envAllowlist": ["A=B"]}`, false, "envAllowlist[0]"},
		{"env prefix", `{"envAllowlist": ["LC_*", "*"]}`, false, ""},
		{"unknown toolset", `{"toolsets": ["core", "emacs"]}`, false, `unknown toolset "emacs"`},
		{"empty image", `{"images": [""]}`, false, "images[0]"},
		{"too many patterns", `{"deniedPaths": [` + strings.Repeat(`"a",`, MaxListLen) + `"a"]}`, true, "more than 256"},
		// A workspace file may only narrow: tenant-only fields are refused by name.
		{"workspace limits", `{"limits": {"cpus": 64}}`, true, `field "limits" is tenant-only`},
		{"workspace images", `{"images": ["x"]}`, true, `field "images" is tenant-only`},
		{"workspace network bad entry", `{"network": {"allow": ["**.com"]}}`, true, `**.com`},
		{"network scheme", `{"network": {"allow": ["http://x"]}}`, false, `http://x`},
		{"network ip", `{"network": {"allow": ["300.1.1.1"]}}`, false, `300.1.1.1`},
		{"network star", `{"network": {"allow": ["*"]}}`, false, `"*"`},
		{"network empty", `{"network": {"allow": [""]}}`, false, `""`},
		{"network unknown key", `{"network": {"alow": []}}`, false, `alow`},
		{"network string", `{"network": "yes"}`, false, `network must be false, true, "direct" or {"allow"`},
		{"network direct wrong case", `{"network": "Direct"}`, false, `network must be false, true, "direct"`},
		{"network number", `{"network": 1}`, false, `network must be false, true, "direct"`},
		{"network list", `{"network": ["a.test"]}`, false, `network must be false, true, "direct"`},
		{"network direct", `{"network": "direct"}`, false, ""},
		{"workspace network direct", `{"network": "direct"}`, true, `network "direct" is tenant-only`},
		{"workspace network true", `{"network": true}`, true, ""},
		{"preview zero", `{"previewPorts": [0]}`, false, `previewPorts[0]`},
		{"preview big", `{"previewPorts": [65536]}`, false, `previewPorts[0]`},
		{"preview abc", `{"previewPorts": ["abc"]}`, false, `previewPorts[0]`},
		{"preview range", `{"previewPorts": [3000, "9000-8000"]}`, false, `previewPorts[1]`},
		{"workspace allowPolicyWrites", `{"allowPolicyWrites": true}`, true, `field "allowPolicyWrites" is tenant-only`},
		{"workspace toolsets", `{"allowedPaths": ["**"], "toolsets": ["core"]}`, true, `field "toolsets" is tenant-only`},
		{"workspace sessionTTL", `{"sessionTTL": "1h"}`, true, `field "sessionTTL" is tenant-only`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parse := Parse
			if tt.workspace {
				parse = ParseWorkspace
			}
			p, err := parse([]byte(tt.data))
			if tt.wantErr == "" {
				if err != nil || p == nil {
					t.Fatalf("parse = %v, %v; want a policy", p, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("parse error = %v, want it to contain %q", err, tt.wantErr)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("parse error %v does not wrap ErrInvalid", err)
			}
		})
	}
}

func TestParseValues(t *testing.T) {
	p, err := Parse([]byte(`{"sessionTTL": "30m", "limits": {"cpus": 0.5}, "rate": {"perSecond": 2.5},
		"allowedCommands": [], "envAllowlist": null}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.SessionTTL.Std() != 30*time.Minute || p.Limits.CPUs != 0.5 || p.Rate.PerSecond != 2.5 {
		t.Errorf("parsed %+v", p)
	}
	if p.AllowedCommands == nil || len(p.AllowedCommands) != 0 {
		t.Errorf("allowedCommands [] parsed as %#v, want empty and non-nil", p.AllowedCommands)
	}
	if p.EnvAllowlist != nil {
		t.Errorf("envAllowlist null parsed as %#v, want nil", p.EnvAllowlist)
	}
}

// TestRoundTrip checks that omitted and empty lists stay distinct through JSON: an
// empty allowedCommands ("none") must not come back as nil ("any").
func TestRoundTrip(t *testing.T) {
	for _, in := range []*Policy{
		Default(),
		{AllowedCommands: []string{}, EnvAllowlist: []string{}, AllowedPaths: []string{}},
		{SessionTTL: Duration(90 * time.Second), Limits: &Limits{Pids: 10}, Network: &Network{Open: true}},
	} {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Parse(b)
		if err != nil {
			t.Fatalf("Parse(%s): %v", b, err)
		}
		if !reflect.DeepEqual(in, out) {
			t.Errorf("round trip of %s: got %+v, want %+v", b, out, in)
		}
	}
}

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
	if got := (&Policy{}).EnabledToolsets(); !reflect.DeepEqual(got, AllToolsets) {
		t.Errorf("EnabledToolsets of {} = %v", got)
	}
}
