package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"hookd/internal/core"
)

func (s *Store) TenantCreate(ctx context.Context, t core.Tenant, key core.APIKey) error {
	return mapErr(s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)`,
			t.ID, t.Name, t.CreatedAt); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO api_keys (id, tenant_id, hash, created_at) VALUES ($1, $2, $3, $4)`,
			key.ID, key.TenantID, key.Hash, key.CreatedAt)
		return err
	}))
}

func (s *Store) TenantGet(ctx context.Context, id string) (core.Tenant, error) {
	var t core.Tenant
	var created pgtype.Timestamptz
	err := s.pool.QueryRow(ctx, `SELECT id, name, created_at FROM tenants WHERE id = $1`, id).
		Scan(&t.ID, &t.Name, &created)
	if err != nil {
		return core.Tenant{}, mapErr(err)
	}
	t.CreatedAt = tm(created)
	return t, nil
}

func (s *Store) APIKeyByHash(ctx context.Context, hash string) (core.APIKey, error) {
	var k core.APIKey
	var created pgtype.Timestamptz
	err := s.pool.QueryRow(ctx, `SELECT id, tenant_id, hash, created_at FROM api_keys WHERE hash = $1`, hash).
		Scan(&k.ID, &k.TenantID, &k.Hash, &created)
	if err != nil {
		return core.APIKey{}, mapErr(err)
	}
	k.CreatedAt = tm(created)
	return k, nil
}
