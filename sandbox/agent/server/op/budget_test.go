package op

import (
	"encoding/json"
	"testing"
)

func TestJSONLen(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote\back`, "tab\tnl\ncr\r", "\x00\x1f<>&", "é\u2028\u2029x", "bad\xff\xfeutf8", "日本語"} {
		enc, _ := json.Marshal(s)
		if got, want := JSONLen(s), len(enc)-2; got < want {
			t.Errorf("JSONLen(%q) = %d, encoding/json makes %d", s, got, want)
		}
	}
}
