package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/cwsdev/cws/workspace"
)

// PutSecret records a copy of sec under tenant.
func (s *Store) PutSecret(_ context.Context, tenant string, sec *workspace.SecretRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.secrets[tenant] == nil {
		s.secrets[tenant] = map[string]*workspace.SecretRecord{}
	}
	s.secrets[tenant][sec.Name] = cloneSecret(sec)
	return nil
}

// GetSecret returns a copy of tenant's secret name.
func (s *Store) GetSecret(_ context.Context, tenant, name string) (*workspace.SecretRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, ok := s.secrets[tenant][name]
	if !ok {
		return nil, secretNotFound(name)
	}
	return cloneSecret(sec), nil
}

// ListSecrets returns copies of tenant's secrets, by name.
func (s *Store) ListSecrets(_ context.Context, tenant string) ([]*workspace.SecretRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*workspace.SecretRecord
	for _, name := range slices.Sorted(maps.Keys(s.secrets[tenant])) {
		out = append(out, cloneSecret(s.secrets[tenant][name]))
	}
	return out, nil
}

// DeleteSecret removes tenant's secret name.
func (s *Store) DeleteSecret(_ context.Context, tenant, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.secrets[tenant][name]; !ok {
		return secretNotFound(name)
	}
	delete(s.secrets[tenant], name)
	return nil
}

func cloneSecret(sec *workspace.SecretRecord) *workspace.SecretRecord {
	c := *sec
	c.Hosts = slices.Clone(sec.Hosts)
	c.Sealed = slices.Clone(sec.Sealed)
	return &c
}

func secretNotFound(name string) error {
	return fmt.Errorf("secret %q: %w", name, workspace.ErrNotFound)
}
