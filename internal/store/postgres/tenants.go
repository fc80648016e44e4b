package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"hookd/internal/core"
	"hookd/internal/store"
)

func (s *Store) TenantCreate(ctx context.Context, t core.Tenant, key core.APIKey) error {
	return mapErr(s.inTx(ctx, func(tx pgx.Tx) error {
		// A deleted tenant's ID is never given again: its events,
		// deliveries and audit stay until retention, keyed by that ID.
		tag, err := tx.Exec(ctx, `INSERT INTO tenants (id, name, created_at, uid, metadata, rate_limit, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING`,
			t.ID, t.Name, t.CreatedAt, t.UID, store.EncodeMetadata(t.Metadata), t.RateLimit, ts(t.UpdatedAt))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
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

func scanTenant(row pgx.Row) (core.Tenant, error) {
	var t core.Tenant
	var created, updated pgtype.Timestamptz
	var meta string
	if err := row.Scan(&t.ID, &t.Name, &created, &t.UID, &meta, &t.RateLimit, &updated); err != nil {
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
	t, err := scanTenant(s.pool.QueryRow(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id = $1 AND deleted_at IS NULL`, id))
	if err != nil {
		return core.Tenant{}, mapErr(err)
	}
	return t, nil
}

func (s *Store) TenantByUID(ctx context.Context, uid string) (core.Tenant, error) {
	if uid == "" {
		return core.Tenant{}, store.ErrNotFound
	}
	t, err := scanTenant(s.pool.QueryRow(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE uid = $1 AND deleted_at IS NULL`, uid))
	if err != nil {
		return core.Tenant{}, mapErr(err)
	}
	return t, nil
}

func (s *Store) TenantList(ctx context.Context, p store.TenantListParams) (store.Page[core.Tenant], error) {
	limit := store.PageLimit(p.Limit)
	rows, err := s.pool.Query(ctx, `SELECT `+tenantColumns+` FROM tenants
		WHERE id > $1 AND deleted_at IS NULL ORDER BY id LIMIT $2`, p.Cursor, limit+1)
	if err != nil {
		return store.Page[core.Tenant]{}, mapErr(err)
	}
	defer rows.Close()
	out := []core.Tenant{}
	for rows.Next() {
		t, err := scanTenant(rows)
		if err != nil {
			return store.Page[core.Tenant]{}, err
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return store.Page[core.Tenant]{}, mapErr(err)
	}
	return store.PageOf(out, limit, func(t core.Tenant) string { return t.ID }), nil
}

func (s *Store) TenantUpdate(ctx context.Context, t core.Tenant) error {
	return mapErr(s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE tenants SET name = $2, uid = $3, metadata = $4, rate_limit = $5, updated_at = $6
			WHERE id = $1 AND deleted_at IS NULL`,
			t.ID, t.Name, t.UID, store.EncodeMetadata(t.Metadata), t.RateLimit, ts(t.UpdatedAt))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return store.ErrNotFound
		}
		return writeAudit(ctx, tx, t.ID)
	}))
}

func (s *Store) TenantDelete(ctx context.Context, id string, now time.Time) error {
	return mapErr(s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE tenants SET deleted_at = $2, updated_at = $2 WHERE id = $1 AND deleted_at IS NULL`, id, now)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return store.ErrNotFound
		}
		// Links not yet used die with it; used ones are keys, revoked by the caller.
		if _, err := tx.Exec(ctx, `DELETE FROM portal_tokens WHERE tenant_id = $1 AND used_at IS NULL`, id); err != nil {
			return err
		}
		return writeAudit(ctx, tx, id)
	}))
}

const keyColumns = `id, tenant_id, hash, name, prefix, created_at, expires_at, revoked_at, last_used_at, scope`

func scanKey(row pgx.Row) (core.APIKey, error) {
	var k core.APIKey
	var c, e, r, u pgtype.Timestamptz
	if err := row.Scan(&k.ID, &k.TenantID, &k.Hash, &k.Name, &k.Prefix, &c, &e, &r, &u, &k.Scope); err != nil {
		return k, err
	}
	k.CreatedAt, k.ExpiresAt, k.RevokedAt, k.LastUsedAt = tm(c), tm(e), tm(r), tm(u)
	return k, nil
}

func insertKey(ctx context.Context, tx pgx.Tx, k core.APIKey) error {
	_, err := tx.Exec(ctx, `INSERT INTO api_keys (id, tenant_id, hash, name, prefix, created_at, expires_at, scope)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, k.ID, k.TenantID, k.Hash, k.Name, k.Prefix, k.CreatedAt, ts(k.ExpiresAt), k.Scope)
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

func (s *Store) PortalLinkCreate(ctx context.Context, l core.PortalLink) error {
	return mapErr(s.inTx(ctx, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM tenants WHERE id = $1 AND deleted_at IS NULL`, l.TenantID).Scan(&one); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM portal_tokens WHERE tenant_id = $1 AND expires_at < $2`,
			l.TenantID, l.CreatedAt.Add(-24*time.Hour)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO portal_tokens (id, tenant_id, hash, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5)`, l.ID, l.TenantID, l.Hash, l.CreatedAt, l.ExpiresAt); err != nil {
			return err
		}
		return writeAudit(ctx, tx, l.TenantID)
	}))
}

// PortalLinkRedeem's UPDATE takes the link's row lock: of two nodes
// redeeming it at once, the second waits, then finds it used. It reads
// first: anyone may call it, and a token naming no live link must not
// cost a write transaction.
func (s *Store) PortalLinkRedeem(ctx context.Context, hash string, now time.Time, key core.APIKey) (core.APIKey, error) {
	var one int
	if err := s.pool.QueryRow(ctx, `SELECT 1 FROM portal_tokens WHERE hash = $1 AND used_at IS NULL AND expires_at > $2
		AND tenant_id IN (SELECT id FROM tenants WHERE deleted_at IS NULL)`,
		hash, now).Scan(&one); err != nil {
		return core.APIKey{}, mapErr(err)
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var expires pgtype.Timestamptz
		err := tx.QueryRow(ctx, `UPDATE portal_tokens SET used_at = $1, key_id = $2
			WHERE hash = $3 AND used_at IS NULL AND expires_at > $1
				AND tenant_id IN (SELECT id FROM tenants WHERE deleted_at IS NULL) RETURNING tenant_id, expires_at`,
			now, key.ID, hash).Scan(&key.TenantID, &expires)
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

// takeTurn makes the transactions naming key take turns, on every node
// sharing the database: a transaction-scoped advisory lock (per schema),
// released at commit or rollback. Two keys may share a lock (a hash):
// they then take turns too, which only costs a wait.
func takeTurn(ctx context.Context, tx pgx.Tx, key string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('hookd.' || coalesce(current_schema(), '') || '.' || $1))`, key)
	return err
}
