package sqlite

import (
	"context"
	"database/sql"
	"strings"

	"hookd/internal/audit"
	"hookd/internal/core"
	"hookd/internal/store"
)

// writeAudit writes the audit entry ctx carries, if any, in tx, under
// tenantID: the tenant of the row the change touched.
func writeAudit(ctx context.Context, tx *sql.Tx, tenantID string) error {
	e, ok := audit.Entry(ctx)
	if !ok {
		return nil
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO audit_log (id, at, tenant_id, actor, action, target_id, remote_addr, detail)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		e.ID, ns(e.At), tenantID, e.Actor, e.Action, e.TargetID, e.RemoteAddr, string(e.Detail))
	return err
}

func (s *Store) AuditList(ctx context.Context, p store.AuditListParams) (store.Page[core.AuditEntry], error) {
	limit := store.PageLimit(p.Limit)
	// Only the filters given, so a tenant's page walks audit_log_tenant.
	var where []string
	var args []any
	add := func(cond string, arg any) { where = append(where, cond); args = append(args, arg) }
	if p.TenantID != "" {
		add("tenant_id = ?", p.TenantID)
	}
	if p.Action != "" {
		add("action = ?", p.Action)
	}
	if !p.Since.IsZero() {
		add("at >= ?", ns(p.Since))
	}
	if !p.Until.IsZero() {
		add("at < ?", ns(p.Until))
	}
	if p.Cursor != "" {
		add("id < ?", p.Cursor)
	}
	q := `SELECT id, at, tenant_id, actor, action, target_id, remote_addr, detail FROM audit_log`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := s.r.QueryContext(ctx, q+" ORDER BY id DESC LIMIT ?", append(args, limit+1)...)
	if err != nil {
		return store.Page[core.AuditEntry]{}, err
	}
	defer rows.Close()
	out := []core.AuditEntry{}
	for rows.Next() {
		var e core.AuditEntry
		var at int64
		var detail string
		if err := rows.Scan(&e.ID, &at, &e.TenantID, &e.Actor, &e.Action, &e.TargetID, &e.RemoteAddr, &detail); err != nil {
			return store.Page[core.AuditEntry]{}, err
		}
		e.At, e.Detail = tm(at), []byte(detail)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return store.Page[core.AuditEntry]{}, err
	}
	return store.PageOf(out, limit, func(e core.AuditEntry) string { return e.ID }), nil
}
