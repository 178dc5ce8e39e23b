package redisstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/cwsdev/cws/workspace"
)

// auditField is the stream entry's one field, holding the record's JSON.
const auditField = "r"

// Audit appends r to the stream, trimming it to about Options.AuditMaxLen entries.
func (s *Store) Audit(ctx context.Context, r workspace.AuditRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode audit record: %w", err)
	}
	err = s.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: s.auditKey(),
		MaxLen: s.auditMax,
		Approx: true,
		Values: []string{auditField, string(b)},
	}).Err()
	return s.fail("audit", err)
}

// AuditBatch appends records to the stream in one round trip (pipelined XADDs).
func (s *Store) AuditBatch(ctx context.Context, records []workspace.AuditRecord) error {
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range records {
			b, err := json.Marshal(r)
			if err != nil {
				return fmt.Errorf("encode audit record: %w", err)
			}
			p.XAdd(ctx, &redis.XAddArgs{Stream: s.auditKey(), MaxLen: s.auditMax, Approx: true, Values: []string{auditField, string(b)}})
		}
		return nil
	})
	return s.fail("audit", err)
}

// RecentAudit returns the newest n records, newest first.
func (s *Store) RecentAudit(ctx context.Context, n int) ([]workspace.AuditRecord, error) {
	if n <= 0 {
		return nil, nil
	}
	msgs, err := s.rdb.XRevRangeN(ctx, s.auditKey(), "+", "-", int64(n)).Result()
	if err != nil {
		return nil, s.fail("recent audit", err)
	}
	out := make([]workspace.AuditRecord, 0, len(msgs))
	for _, m := range msgs {
		v, _ := m.Values[auditField].(string)
		var r workspace.AuditRecord
		if err := json.Unmarshal([]byte(v), &r); err != nil {
			return nil, fmt.Errorf("decode audit record %s: %w", m.ID, err)
		}
		out = append(out, r)
	}
	return out, nil
}
