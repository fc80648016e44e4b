package sqlite

import (
	"context"
	"database/sql"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

func (s *Store) TenantCreate(ctx context.Context, t core.Tenant, key core.APIKey) error {
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO tenants (id, name, created_at) VALUES (?, ?, ?)`,
			t.ID, t.Name, ns(t.CreatedAt)); err != nil {
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
	var created int64
	err := s.r.QueryRowContext(ctx, `SELECT id, name, created_at FROM tenants WHERE id = ?`, id).
		Scan(&t.ID, &t.Name, &created)
	if err != nil {
		return core.Tenant{}, mapErr(err)
	}
	t.CreatedAt = tm(created)
	return t, nil
}

const keyColumns = `id, tenant_id, hash, name, prefix, created_at, expires_at, revoked_at, last_used_at`

func scanKey(sc scanner) (core.APIKey, error) {
	var k core.APIKey
	var c, e, r, u int64
	if err := sc.Scan(&k.ID, &k.TenantID, &k.Hash, &k.Name, &k.Prefix, &c, &e, &r, &u); err != nil {
		return k, err
	}
	k.CreatedAt, k.ExpiresAt, k.RevokedAt, k.LastUsedAt = tm(c), tm(e), tm(r), tm(u)
	return k, nil
}

func insertKey(ctx context.Context, tx *sql.Tx, k core.APIKey) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO api_keys (id, tenant_id, hash, name, prefix, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, k.ID, k.TenantID, k.Hash, k.Name, k.Prefix, ns(k.CreatedAt), ns(k.ExpiresAt))
	return err
}

func (s *Store) APIKeyByHash(ctx context.Context, hash string) (core.APIKey, error) {
	k, err := scanKey(s.r.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE hash = ?`, hash))
	if err != nil {
		return core.APIKey{}, mapErr(err)
	}
	return k, nil
}

func (s *Store) APIKeyCreate(ctx context.Context, key core.APIKey) error {
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM tenants WHERE id = ?`, key.TenantID).Scan(&one); err != nil {
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
	rows, err := s.r.QueryContext(ctx, `SELECT `+keyColumns+` FROM api_keys
		WHERE tenant_id = ? AND id > ? ORDER BY id LIMIT ?`, p.TenantID, p.Cursor, limit+1)
	if err != nil {
		return store.Page[core.APIKey]{}, err
	}
	defer rows.Close()
	keys := []core.APIKey{}
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return store.Page[core.APIKey]{}, err
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return store.Page[core.APIKey]{}, err
	}
	return store.PageOf(keys, limit, func(k core.APIKey) string { return k.ID }), nil
}

func (s *Store) APIKeyRevoke(ctx context.Context, tenantID, id string, now time.Time) (core.APIKey, error) {
	var k core.APIKey
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		var err error
		k, err = scanKey(tx.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys
			WHERE id = ? AND (? = '' OR tenant_id = ?)`, id, tenantID, tenantID))
		if err != nil {
			return err
		}
		if !k.RevokedAt.IsZero() {
			return store.ErrConflict
		}
		if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ?`, ns(now), id); err != nil {
			return err
		}
		k.RevokedAt = now
		return writeAudit(ctx, tx, k.TenantID)
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
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		for id, at := range used {
			if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET last_used_at = max(last_used_at, ?) WHERE id = ?`,
				ns(at), id); err != nil {
				return err
			}
		}
		return nil
	})
}
