package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"hookd/internal/core"
	"hookd/internal/store"
)

func (s *Store) TenantCreate(ctx context.Context, t core.Tenant, key core.APIKey) error {
	return mapErr(s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)`,
			t.ID, t.Name, t.CreatedAt); err != nil {
			return err
		}
		if err := insertKey(ctx, tx, key); err != nil {
			return err
		}
		return writeAudit(ctx, tx, t.ID)
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

const keyColumns = `id, tenant_id, hash, name, prefix, created_at, expires_at, revoked_at, last_used_at`

func scanKey(row pgx.Row) (core.APIKey, error) {
	var k core.APIKey
	var c, e, r, u pgtype.Timestamptz
	if err := row.Scan(&k.ID, &k.TenantID, &k.Hash, &k.Name, &k.Prefix, &c, &e, &r, &u); err != nil {
		return k, err
	}
	k.CreatedAt, k.ExpiresAt, k.RevokedAt, k.LastUsedAt = tm(c), tm(e), tm(r), tm(u)
	return k, nil
}

func insertKey(ctx context.Context, tx pgx.Tx, k core.APIKey) error {
	_, err := tx.Exec(ctx, `INSERT INTO api_keys (id, tenant_id, hash, name, prefix, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, k.ID, k.TenantID, k.Hash, k.Name, k.Prefix, k.CreatedAt, ts(k.ExpiresAt))
	return err
}

func (s *Store) APIKeyByHash(ctx context.Context, hash string) (core.APIKey, error) {
	k, err := scanKey(s.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE hash = $1`, hash))
	if err != nil {
		return core.APIKey{}, mapErr(err)
	}
	return k, nil
}

func (s *Store) APIKeyCreate(ctx context.Context, key core.APIKey) error {
	return mapErr(s.inTx(ctx, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM tenants WHERE id = $1`, key.TenantID).Scan(&one); err != nil {
			return err
		}
		if err := insertKey(ctx, tx, key); err != nil {
			return err
		}
		return writeAudit(ctx, tx, key.TenantID)
	}))
}

func (s *Store) APIKeyList(ctx context.Context, p store.APIKeyListParams) (store.Page[core.APIKey], error) {
	limit := store.PageLimit(p.Limit)
	rows, err := s.pool.Query(ctx, `SELECT `+keyColumns+` FROM api_keys
		WHERE tenant_id = $1 AND id > $2 ORDER BY id LIMIT $3`, p.TenantID, p.Cursor, limit+1)
	if err != nil {
		return store.Page[core.APIKey]{}, err
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (core.APIKey, error) { return scanKey(r) })
	if err != nil {
		return store.Page[core.APIKey]{}, err
	}
	return store.PageOf(keys, limit, func(k core.APIKey) string { return k.ID }), nil
}

func (s *Store) APIKeyRevoke(ctx context.Context, tenantID, id string, now time.Time) (core.APIKey, error) {
	var k core.APIKey
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		k, err = scanKey(tx.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys
			WHERE id = $1 AND ($2 = '' OR tenant_id = $2) FOR UPDATE`, id, tenantID))
		if err != nil {
			return err
		}
		if !k.RevokedAt.IsZero() {
			return store.ErrConflict
		}
		if _, err := tx.Exec(ctx, `UPDATE api_keys SET revoked_at = $1 WHERE id = $2`, now, id); err != nil {
			return err
		}
		k.RevokedAt = now
		if err := writeAudit(ctx, tx, k.TenantID); err != nil {
			return err
		}
		return s.notify(ctx, tx, store.Due{Kind: store.DueKeyRevoked, KeyID: id})
	})
	if err != nil {
		return core.APIKey{}, mapErr(err)
	}
	return k, nil
}

func (s *Store) APIKeysTouch(ctx context.Context, used map[string]time.Time) error {
	if len(used) == 0 {
		return nil
	}
	ids := make([]string, 0, len(used))
	ats := make([]time.Time, 0, len(used))
	for id, at := range used {
		ids = append(ids, id)
		ats = append(ats, at)
	}
	_, err := s.pool.Exec(ctx, `UPDATE api_keys k SET last_used_at = greatest(k.last_used_at, u.at)
		FROM unnest($1::text[], $2::timestamptz[]) AS u(id, at) WHERE k.id = u.id`, ids, ats)
	return err
}
