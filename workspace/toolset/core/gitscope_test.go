package core

import (
	"testing"

	"github.com/cwsdev/cws/sandbox/agent/guard"
)

func TestRefusesNone(t *testing.T) {
	for _, tc := range []struct {
		g    guard.Guard
		want bool
	}{
		{guard.Guard{}, true},
		{guard.Guard{Allow: [][]string{{"**"}}}, true},
		{guard.Guard{Allow: [][]string{{"**"}, {"src/**", "**"}}, Protect: []string{".cws-policy.json"}}, true},
		{guard.Guard{Allow: [][]string{{"**"}}, Deny: []string{".env"}}, false},
		{guard.Guard{Allow: [][]string{{"**"}, {"src/**"}}}, false},
		{guard.Guard{Allow: [][]string{{}}}, false},
	} {
		if got := refusesNone(&tc.g); got != tc.want {
			t.Errorf("refusesNone(%+v) = %v, want %v", tc.g, got, tc.want)
		}
	}
}
