package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/cwsdev/cws/workspace"
)

// A tenant's secrets are one hash, name → the record's JSON (its value sealed).

func (s *Store) secretsKey(tenant string) string { return s.prefix + "tenant:" + tenant + ":secrets" }

// PutSecret records sec under tenant.
func (s *Store) PutSecret(ctx context.Context, tenant string, sec *workspace.SecretRecord) error {
	if !validTenant(tenant) {
		return fmt.Errorf("%w: tenant %q", workspace.ErrInvalid, tenant)
	}
	b, err := json.Marshal(sec)
	if err != nil {
		return err
	}
	if err := s.rdb.HSet(ctx, s.secretsKey(tenant), sec.Name, b).Err(); err != nil {
		return s.fail("put secret", err)
	}
	return nil
}

// GetSecret returns tenant's secret name.
func (s *Store) GetSecret(ctx context.Context, tenant, name string) (*workspace.SecretRecord, error) {
	if !validTenant(tenant) {
		return nil, secretNotFound(name)
	}
	b, err := s.rdb.HGet(ctx, s.secretsKey(tenant), name).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, secretNotFound(name)
	}
	if err != nil {
		return nil, s.fail("get secret", err)
	}
	var sec workspace.SecretRecord
	if err := json.Unmarshal(b, &sec); err != nil {
		return nil, fmt.Errorf("secret %q: a record that can't be read: %v", name, err)
	}
	return &sec, nil
}

// ListSecrets returns tenant's secrets, by name.
func (s *Store) ListSecrets(ctx context.Context, tenant string) ([]*workspace.SecretRecord, error) {
	if !validTenant(tenant) {
		return nil, nil
	}
	all, err := s.rdb.HGetAll(ctx, s.secretsKey(tenant)).Result()
	if err != nil {
		return nil, s.fail("list secrets", err)
	}
	out := make([]*workspace.SecretRecord, 0, len(all))
	for name, b := range all {
		var sec workspace.SecretRecord
		if err := json.Unmarshal([]byte(b), &sec); err != nil {
			return nil, fmt.Errorf("secret %q: a record that can't be read: %v", name, err)
		}
		out = append(out, &sec)
	}
	slices.SortFunc(out, func(a, b *workspace.SecretRecord) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out, nil
}

// DeleteSecret removes tenant's secret name.
func (s *Store) DeleteSecret(ctx context.Context, tenant, name string) error {
	if !validTenant(tenant) {
		return secretNotFound(name)
	}
	n, err := s.rdb.HDel(ctx, s.secretsKey(tenant), name).Result()
	if err != nil {
		return s.fail("delete secret", err)
	}
	if n == 0 {
		return secretNotFound(name)
	}
	return nil
}

func secretNotFound(name string) error {
	return fmt.Errorf("secret %q: %w", name, workspace.ErrNotFound)
}
