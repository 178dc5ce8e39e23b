// Package storetest is the contract suite for workspace.Store: Run holds every
// implementation (memstore, redisstore) to the same behaviour, so the in-memory store
// stays an honest stand-in for Redis.
//
// What the suite pins down beyond the interface's comments:
//   - Time fields survive a round trip with nanosecond precision (both stores keep
//     RFC 3339 nanosecond text or the time.Time itself). The location and the monotonic
//     reading do not survive, so compare with time.Time.Equal.
//   - Stores hand out copies: changing a returned session changes nothing stored.
//   - A tenant is non-empty without ':' or '/', an id non-empty (ErrInvalid otherwise),
//     because redisstore builds keys from them.
//   - Errors for another tenant's id and for a missing id differ only in the id.
//   - CreateSession checks for a conflicting id before the quota.
//   - Allow's windows are aligned to the Unix epoch (millisecond resolution, read from
//     the replica's clock); limit <= 0 allows without counting; a window under 1ms is
//     ErrInvalid.
package storetest

import (
	"testing"

	"github.com/cwsdev/cws/workspace"
)

// Run runs the contract suite. newStore returns a new, empty store for each subtest
// and arranges its cleanup (t.Cleanup).
func Run(t *testing.T, newStore func(t *testing.T) workspace.Store) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s workspace.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"Copies", testCopies},
		{"Update", testUpdate},
		{"Touch", testTouch},
		{"Delete", testDelete},
		{"ListOrder", testListOrder},
		{"OtherTenantIsNotFound", testOtherTenant},
		{"Invalid", testInvalid},
		{"Conflict", testConflict},
		{"QuotaConcurrent", testQuotaConcurrent},
		{"QuotaFreedByDelete", testQuotaFreedByDelete},
		{"QuotaPerTenant", testQuotaPerTenant},
		{"AllSessions", testAllSessions},
		{"ClaimRelease", testClaimRelease},
		{"ClaimConcurrent", testClaimConcurrent},
		{"ClaimTTL", testClaimTTL},
		{"AllowCounts", testAllowCounts},
		{"AllowWindowEnds", testAllowWindowEnds},
		{"Audit", testAudit},
		{"State", testState},
		{"Secrets", testSecrets},
		{"Ping", testPing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}
