package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cwsdev/cws/workspace"
)

// testSecrets: a secret round-trips (sealed bytes, hosts, times), a put replaces it,
// another tenant's name is not found, the list is by name, and a delete of a missing
// one is ErrNotFound.
func testSecrets(t *testing.T, s workspace.Store) {
	ctx := context.Background()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	put := func(tenant, name string, sealed []byte) {
		t.Helper()
		if err := s.PutSecret(ctx, tenant, &workspace.SecretRecord{Name: name, Hosts: []string{"github.com", "*.github.com"},
			Sealed: sealed, CreatedAt: at, UpdatedAt: at.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	put("acme", "gh", []byte{0, 1, 2, 255})
	put("acme", "a-first", []byte{9})
	got, err := s.GetSecret(ctx, "acme", "gh")
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "gh" || !slices.Equal(got.Sealed, []byte{0, 1, 2, 255}) || !slices.Equal(got.Hosts, []string{"github.com", "*.github.com"}) ||
		!got.CreatedAt.Equal(at) || !got.UpdatedAt.Equal(at.Add(time.Hour)) {
		t.Errorf("round trip: %+v", got)
	}
	got.Sealed[0] = 42
	if again, _ := s.GetSecret(ctx, "acme", "gh"); again.Sealed[0] != 0 {
		t.Error("changing a returned secret changed the stored one")
	}
	put("acme", "gh", []byte{7})
	if got, _ := s.GetSecret(ctx, "acme", "gh"); !slices.Equal(got.Sealed, []byte{7}) {
		t.Errorf("after a second put: %v", got.Sealed)
	}
	if _, err := s.GetSecret(ctx, "beta", "gh"); !errors.Is(err, workspace.ErrNotFound) {
		t.Errorf("another tenant's secret: %v, want ErrNotFound", err)
	}
	list, err := s.ListSecrets(ctx, "acme")
	if err != nil || len(list) != 2 || list[0].Name != "a-first" || list[1].Name != "gh" {
		t.Errorf("list = %v, %v", list, err)
	}
	if list, _ := s.ListSecrets(ctx, "beta"); len(list) != 0 {
		t.Errorf("another tenant lists %v", list)
	}
	if err := s.DeleteSecret(ctx, "beta", "gh"); !errors.Is(err, workspace.ErrNotFound) {
		t.Errorf("delete another tenant's: %v", err)
	}
	if err := s.DeleteSecret(ctx, "acme", "gh"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSecret(ctx, "acme", "gh"); !errors.Is(err, workspace.ErrNotFound) {
		t.Errorf("after delete: %v", err)
	}
	if err := s.DeleteSecret(ctx, "acme", "gh"); !errors.Is(err, workspace.ErrNotFound) {
		t.Errorf("delete twice: %v", err)
	}
}
