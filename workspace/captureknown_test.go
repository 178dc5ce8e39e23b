package workspace

import (
	"fmt"
	"testing"
)

// The known contents stay within their bounds: the oldest sandboxes go first, and a
// capture too large to remember is not.
func TestKnownSumsBounded(t *testing.T) {
	var k knownSums
	set := func(n int) map[string]bool {
		m := make(map[string]bool, n)
		for i := range n {
			m[fmt.Sprint(i)] = true
		}
		return m
	}
	for i := range maxKnown + 5 {
		k.put(fmt.Sprintf("sb-%d", i), set(10))
	}
	if len(k.m) != maxKnown || k.total != maxKnown*10 || k.get("sb-0") != nil || k.get(fmt.Sprintf("sb-%d", maxKnown+4)) == nil {
		t.Errorf("%d sandboxes, %d sums held; want the newest %d", len(k.m), k.total, maxKnown)
	}
	k.put("big", set(maxKnownSums-100))
	if k.total > maxKnownSums || k.get("big") == nil {
		t.Errorf("%d sums held after a large capture; want at most %d, the large one kept", k.total, maxKnownSums)
	}
	k.put("huge", set(maxKnownSums+1))
	if k.get("huge") != nil || k.total > maxKnownSums {
		t.Errorf("a capture past the bound was remembered (%d held)", k.total)
	}
	k.put("big", set(3))
	k.forget("big")
	if k.get("big") != nil {
		t.Error("forget kept it")
	}
	sum := 0
	for _, s := range k.m {
		sum += len(s.sums)
	}
	if sum != k.total {
		t.Errorf("total %d, held %d", k.total, sum)
	}
}
