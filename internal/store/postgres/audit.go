package postgres

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"hookd/internal/audit"
	"hookd/internal/core"
	"hookd/internal/store"
)

// writeAudit writes the audit entry ctx carries, if any, in tx, under
// tenantID: the tenant of the row the change touched.
func writeAudit(ctx context.Context, tx pgx.Tx, tenantID string) error {
	e, ok := audit.Entry(ctx)
	if !ok {
		return nil
	}
	_, err := tx.Exec(ctx, `INSERT INTO audit_log (id, at, tenant_id, actor, action, target_id, remote_addr, detail)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		e.ID, e.At, tenantID, e.Actor, e.Action, e.TargetID, e.RemoteAddr, string(e.Detail))
	return err
}

func (s *Store) AuditList(ctx context.Context, p store.AuditListParams) (store.Page[core.AuditEntry], error) {
	limit := store.PageLimit(p.Limit)
	// Only the filters given, so a tenant's page walks audit_log_tenant.
	var where []string
	var args []any
	add := func(cond string, arg any) {
		args = append(args, arg)
		where = append(where, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	if p.TenantID != "" {
		add("tenant_id = ?", p.TenantID)
	}
	if p.Action != "" {
		add("action = ?", p.Action)
	}
	if !p.Since.IsZero() {
		add("at >= ?", p.Since)
	}
	if !p.Until.IsZero() {
		add("at < ?", p.Until)
	}
	if p.Cursor != "" {
		add("id < ?", p.Cursor)
	}
	q := `SELECT id, at, tenant_id, actor, action, target_id, remote_addr, detail::text FROM audit_log`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, limit+1)
	rows, err := s.pool.Query(ctx, q+" ORDER BY id DESC LIMIT $"+strconv.Itoa(len(args)), args...)
	if err != nil {
		return store.Page[core.AuditEntry]{}, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (core.AuditEntry, error) {
		var e core.AuditEntry
		var at pgtype.Timestamptz
		var detail string
		err := r.Scan(&e.ID, &at, &e.TenantID, &e.Actor, &e.Action, &e.TargetID, &e.RemoteAddr, &detail)
		e.At, e.Detail = tm(at), []byte(detail)
		return e, err
	})
	if err != nil {
		return store.Page[core.AuditEntry]{}, err
	}
	return store.PageOf(out, limit, func(e core.AuditEntry) string { return e.ID }), nil
}
