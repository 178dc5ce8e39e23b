package workspace_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cwsdev/cws/workspace"
)

// What a call types or writes never reaches the audit, whatever the case of its
// argument's name (JSON decoding matches field names in any case).
func TestAuditArgsRedactedInAnyCase(t *testing.T) {
	for _, k := range []string{"text", "TEXT", "Text", "keys", "KEYS", "contents", "Contents", "env", "ENV", "newString", "NEWSTRING"} {
		got := workspace.AuditArgs(json.RawMessage(`{"id":"t1","` + k + `":"hunter2"}`))
		if strings.Contains(got, "hunter2") || !strings.Contains(got, `"t1"`) {
			t.Errorf("%s: the audit keeps %s", k, got)
		}
	}
}

// Arguments that name nothing redacted are kept as they are (compacted), and those
// that name it in a way only a decoder sees are still redacted: an escaped name, a
// name folded from outside ASCII, a name among many arguments or in long arguments.
func TestAuditArgsRedactedHowever(t *testing.T) {
	long := strings.Repeat("x", 600)
	for _, tc := range []struct{ name, args, want string }{
		{"plain", `{ "path" : "f4k" }`, `{"path":"f4k"}`},
		{"plain, redacted name in a value", `{"path":"contents/env.txt"}`, `{"path":"contents/env.txt"}`},
		{"plain, long", `{"path":"` + long + `"}`, `{"path":"` + long[:auditMax-len(`{"path":"`)] + "…"},
		{"escaped name", `{"\u0063ontents":"hunter2","path":"a"}`, `{"contents":"(9 bytes)","path":"a"}`},
		{"escaped letter in the middle", `{"st\u0064in":"hunter2"}`, `{"stdin":"(9 bytes)"}`},
		{"Kelvin sign", "{\"\u212aeys\":\"hunter2\"}", "{\"\u212aeys\":\"(9 bytes)\"}"},
		{"long ſ", "{\"\u017ftdin\":\"hunter2\"}", "{\"\u017ftdin\":\"(9 bytes)\"}"},
		{"long arguments", `{"path":"` + long + `","Text":"hunter2"}`, `{"Text":"(9 bytes)","path":"` + long[:auditMax-len(`{"Text":"(9 bytes)","path":"`)] + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := workspace.AuditArgs(json.RawMessage(tc.args))
			if got != tc.want {
				t.Errorf("AuditArgs(%.80s) = %.200s, want %.200s", tc.args, got, tc.want)
			}
		})
	}
}

const auditMax = 160 // workspace.auditArgsMax

// BenchmarkAuditArgs: what the audit of a call's arguments costs the call, for
// arguments that name nothing redacted (most calls: the text alone is scanned) and
// for arguments that do (decoded, redacted, encoded again).
//
//	go test ./workspace -run '^$' -bench AuditArgs -benchmem
func BenchmarkAuditArgs(b *testing.B) {
	for _, bc := range []struct{ name, args string }{
		{"path", `{"path":"f4k"}`},
		{"path and text", `{"path":"f4k","text":"hunter2"}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			args := json.RawMessage(bc.args)
			for b.Loop() {
				workspace.AuditArgs(args)
			}
		})
	}
}
