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
