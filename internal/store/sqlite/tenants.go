package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

func (s *Store) TenantCreate(ctx context.Context, t core.Tenant, key core.APIKey) error {
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		// A deleted tenant's ID is never given again: its events,
		// deliveries and audit stay until retention, keyed by that ID.
		res, err := tx.ExecContext(ctx, `INSERT INTO tenants (id, name, created_at, uid, metadata, rate_limit, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
			t.ID, t.Name, ns(t.CreatedAt), t.UID, store.EncodeMetadata(t.Metadata), t.RateLimit, ns(t.UpdatedAt))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return store.ErrConflict
		}
		if key.ID != "" {
			if err := insertKey(ctx, tx, key); err != nil {
				return err
			}
		}
		return writeAudit(ctx, tx, t.ID)
	}))
}

const tenantColumns = `id, name, created_at, uid, metadata, rate_limit, updated_at`

func scanTenant(sc scanner) (core.Tenant, error) {
	var t core.Tenant
	var created, updated int64
	var meta string
	if err := sc.Scan(&t.ID, &t.Name, &created, &t.UID, &meta, &t.RateLimit, &updated); err != nil {
		return t, err
	}
	var err error
	if t.Metadata, err = store.DecodeMetadata(meta); err != nil {
		return t, fmt.Errorf("tenant %s: %w", t.ID, err)
	}
	t.CreatedAt, t.UpdatedAt = tm(created), tm(updated)
	return t, nil
}

func (s *Store) TenantGet(ctx context.Context, id string) (core.Tenant, error) {
	t, err := scanTenant(s.r.QueryRowContext(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id = ? AND deleted_at IS NULL`, id))
	if err != nil {
		return core.Tenant{}, mapErr(err)
	}
	return t, nil
}

func (s *Store) TenantByUID(ctx context.Context, uid string) (core.Tenant, error) {
	if uid == "" {
		return core.Tenant{}, store.ErrNotFound
	}
	t, err := scanTenant(s.r.QueryRowContext(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE uid = ? AND deleted_at IS NULL`, uid))
	if err != nil {
		return core.Tenant{}, mapErr(err)
	}
	return t, nil
}

func (s *Store) TenantList(ctx context.Context, p store.TenantListParams) (store.Page[core.Tenant], error) {
	limit := store.PageLimit(p.Limit)
	rows, err := s.r.QueryContext(ctx, `SELECT `+tenantColumns+` FROM tenants
		WHERE id > ? AND deleted_at IS NULL ORDER BY id LIMIT ?`, p.Cursor, limit+1)
	if err != nil {
		return store.Page[core.Tenant]{}, mapErr(err)
	}
	defer rows.Close()
	ts := []core.Tenant{}
	for rows.Next() {
		t, err := scanTenant(rows)
		if err != nil {
			return store.Page[core.Tenant]{}, err
		}
		ts = append(ts, t)
	}
	if err := rows.Err(); err != nil {
		return store.Page[core.Tenant]{}, mapErr(err)
	}
	return store.PageOf(ts, limit, func(t core.Tenant) string { return t.ID }), nil
}

func (s *Store) TenantUpdate(ctx context.Context, t core.Tenant) error {
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE tenants SET name = ?, uid = ?, metadata = ?, rate_limit = ?, updated_at = ?
			WHERE id = ? AND deleted_at IS NULL`,
			t.Name, t.UID, store.EncodeMetadata(t.Metadata), t.RateLimit, ns(t.UpdatedAt), t.ID)
		if err := mustAffect(res, err); err != nil {
			return err
		}
		return writeAudit(ctx, tx, t.ID)
	}))
}

func (s *Store) TenantDelete(ctx context.Context, id string, now time.Time) error {
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE tenants SET deleted_at = ?, updated_at = ? WHERE id = ? AND deleted_at IS NULL`,
			ns(now), ns(now), id)
		if err := mustAffect(res, err); err != nil {
			return err
		}
		// Links not yet used die with it; used ones are keys, revoked by the caller.
		if _, err := tx.ExecContext(ctx, `DELETE FROM portal_tokens WHERE tenant_id = ? AND used_at = 0`, id); err != nil {
			return err
		}
		return writeAudit(ctx, tx, id)
	}))
}

const keyColumns = `id, tenant_id, hash, name, prefix, created_at, expires_at, revoked_at, last_used_at, scope`

func scanKey(sc scanner) (core.APIKey, error) {
	var k core.APIKey
	var c, e, r, u int64
	if err := sc.Scan(&k.ID, &k.TenantID, &k.Hash, &k.Name, &k.Prefix, &c, &e, &r, &u, &k.Scope); err != nil {
		return k, err
	}
	k.CreatedAt, k.ExpiresAt, k.RevokedAt, k.LastUsedAt = tm(c), tm(e), tm(r), tm(u)
	return k, nil
}

func insertKey(ctx context.Context, tx *sql.Tx, k core.APIKey) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO api_keys (id, tenant_id, hash, name, prefix, created_at, expires_at, scope)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, k.ID, k.TenantID, k.Hash, k.Name, k.Prefix, ns(k.CreatedAt), ns(k.ExpiresAt), k.Scope)
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

func (s *Store) PortalLinkCreate(ctx context.Context, l core.PortalLink) error {
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM tenants WHERE id = ? AND deleted_at IS NULL`, l.TenantID).Scan(&one); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM portal_tokens WHERE tenant_id = ? AND expires_at < ?`,
			l.TenantID, ns(l.CreatedAt.Add(-24*time.Hour))); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO portal_tokens (id, tenant_id, hash, created_at, expires_at)
			VALUES (?, ?, ?, ?, ?)`, l.ID, l.TenantID, l.Hash, ns(l.CreatedAt), ns(l.ExpiresAt)); err != nil {
			return err
		}
		return writeAudit(ctx, tx, l.TenantID)
	}))
}

// PortalLinkRedeem reads first: anyone may call it, unauthenticated, and a
// token that names no live link must not cost the one writer a transaction.
func (s *Store) PortalLinkRedeem(ctx context.Context, hash string, now time.Time, key core.APIKey) (core.APIKey, error) {
	var one int
	if err := s.r.QueryRowContext(ctx, `SELECT 1 FROM portal_tokens WHERE hash = ? AND used_at = 0 AND expires_at > ?
		AND tenant_id IN (SELECT id FROM tenants WHERE deleted_at IS NULL)`,
		hash, ns(now)).Scan(&one); err != nil {
		return core.APIKey{}, mapErr(err)
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		var expires int64
		err := tx.QueryRowContext(ctx, `UPDATE portal_tokens SET used_at = ?, key_id = ?
			WHERE hash = ? AND used_at = 0 AND expires_at > ?
				AND tenant_id IN (SELECT id FROM tenants WHERE deleted_at IS NULL) RETURNING tenant_id, expires_at`,
			ns(now), key.ID, hash, ns(now)).Scan(&key.TenantID, &expires)
		if err != nil {
			return err
		}
		key.ExpiresAt, key.Scope = tm(expires), core.ScopePortal
		if err := insertKey(ctx, tx, key); err != nil {
			return err
		}
		return writeAudit(ctx, tx, key.TenantID)
	})
	if err != nil {
		return core.APIKey{}, mapErr(err)
	}
	return key, nil
}
