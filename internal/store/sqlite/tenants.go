package sqlite

import (
	"context"
	"database/sql"

	"hookd/internal/core"
)

func (s *Store) TenantCreate(ctx context.Context, t core.Tenant, key core.APIKey) error {
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO tenants (id, name, created_at) VALUES (?, ?, ?)`,
			t.ID, t.Name, ns(t.CreatedAt)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO api_keys (id, tenant_id, hash, created_at) VALUES (?, ?, ?, ?)`,
			key.ID, key.TenantID, key.Hash, ns(key.CreatedAt))
		return err
	}))
}

func (s *Store) TenantGet(ctx context.Context, id string) (core.Tenant, error) {
	var t core.Tenant
	var created int64
	err := s.r.QueryRowContext(ctx, `SELECT id, name, created_at FROM tenants WHERE id = ?`, id).
		Scan(&t.ID, &t.Name, &created)
	if err != nil {
		return core.Tenant{}, mapErr(err)
	}
	t.CreatedAt = tm(created)
	return t, nil
}

func (s *Store) APIKeyByHash(ctx context.Context, hash string) (core.APIKey, error) {
	var k core.APIKey
	var created int64
	err := s.r.QueryRowContext(ctx, `SELECT id, tenant_id, hash, created_at FROM api_keys WHERE hash = ?`, hash).
		Scan(&k.ID, &k.TenantID, &k.Hash, &created)
	if err != nil {
		return core.APIKey{}, mapErr(err)
	}
	k.CreatedAt = tm(created)
	return k, nil
}
