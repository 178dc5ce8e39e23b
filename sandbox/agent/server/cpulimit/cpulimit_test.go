package cpulimit

import "testing"

func TestQuotaCPUs(t *testing.T) {
	for _, c := range []struct {
		quota, period string
		want          int
	}{
		{"100000", "100000", 1},
		{"150000", "100000", 2},
		{"50000", "100000", 1},
		{"400000", "100000", 4},
		{"-1", "100000", 0},
		{"max", "100000", 0},
		{"100000", "0", 0},
		{"", "", 0},
	} {
		if got := quotaCPUs(c.quota, c.period); got != c.want {
			t.Errorf("quotaCPUs(%q, %q) = %d, want %d", c.quota, c.period, got, c.want)
		}
	}
}
