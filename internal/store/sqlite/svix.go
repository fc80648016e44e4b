package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

func (s *Store) SubscriptionByUID(ctx context.Context, tenantID, uid string) (core.Subscription, error) {
	if uid == "" {
		return core.Subscription{}, store.ErrNotFound
	}
	sub, err := s.scanSub(s.r.QueryRowContext(ctx, `SELECT `+subColumns+` FROM subscriptions
		WHERE tenant_id = ? AND uid = ? AND deleted_at IS NULL`, tenantID, uid))
	if err != nil {
		return core.Subscription{}, mapErr(err)
	}
	return sub, nil
}

// attemptRowColumns prefixes deliveryColumns with d. for the join.
var attemptRowColumns = `a.n, a.started_at, a.duration_ns, a.status_code, a.error, a.response, d.` +
	strings.ReplaceAll(strings.Join(strings.Fields(deliveryColumns), " "), ", ", ", d.")

func (s *Store) AttemptList(ctx context.Context, p store.AttemptListParams) (store.Page[store.AttemptRow], error) {
	limit := store.PageLimit(p.Limit)
	q := `SELECT ` + attemptRowColumns + ` FROM attempts a JOIN deliveries d ON d.id = a.delivery_id WHERE 1 = 1`
	var args []any
	if p.SubscriptionID != "" {
		q += ` AND d.subscription_id = ?`
		args = append(args, p.SubscriptionID)
	}
	if p.EventID != "" {
		q += ` AND d.event_id = ?`
		args = append(args, p.EventID)
	}
	if p.TenantID != "" {
		q += ` AND d.tenant_id = ?`
		args = append(args, p.TenantID)
	}
	if !p.Since.IsZero() {
		q += ` AND a.started_at >= ?`
		args = append(args, ns(p.Since))
	}
	if !p.Until.IsZero() {
		q += ` AND a.started_at < ?`
		args = append(args, ns(p.Until))
	}
	if p.Cursor != "" {
		dlv, n, err := parseAttemptCursor(p.Cursor)
		if err != nil {
			return store.Page[store.AttemptRow]{}, err
		}
		q += ` AND (a.delivery_id < ? OR (a.delivery_id = ? AND a.n < ?))`
		args = append(args, dlv, dlv, n)
	}
	q += ` ORDER BY a.delivery_id DESC, a.n DESC LIMIT ?`
	args = append(args, limit+1)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return store.Page[store.AttemptRow]{}, mapErr(err)
	}
	defer rows.Close()
	out := []store.AttemptRow{}
	for rows.Next() {
		var r store.AttemptRow
		var started, dur int64
		var d core.Delivery
		var next, c, u int64
		if err := rows.Scan(&r.Attempt.N, &started, &dur, &r.Attempt.StatusCode, &r.Attempt.Error, &r.Attempt.Response,
			&d.ID, &d.EventID, &d.SubscriptionID, &d.TenantID, &d.EventType, &d.Host,
			&d.Shard, &d.State, &d.AttemptCount, &d.RoundStart, &next, &d.LastStatus, &d.LastError,
			&d.Sequence, &c, &u, &d.OrderingKey); err != nil {
			return store.Page[store.AttemptRow]{}, err
		}
		d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = tm(next), tm(c), tm(u)
		r.Attempt.DeliveryID, r.Attempt.StartedAt, r.Attempt.Duration = d.ID, tm(started), time.Duration(dur)
		r.Delivery = d
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return store.Page[store.AttemptRow]{}, mapErr(err)
	}
	return store.PageOf(out, limit, store.AttemptRow.Cursor), nil
}

// parseAttemptCursor reads AttemptRow.Cursor; one it did not make is
// store.ErrNotFound's kin: no such position.
func parseAttemptCursor(c string) (string, int, error) {
	dlv, nStr, ok := strings.Cut(c, ".")
	var n int
	if _, err := fmt.Sscanf(nStr, "%d", &n); !ok || err != nil {
		return "", 0, fmt.Errorf("attempt cursor %q: %w", c, store.ErrInvalidCursor)
	}
	return dlv, n, nil
}

const eventTypeColumns = `name, description, archived, deprecated, group_name, feature_flags, schemas, created_at, updated_at`

func scanEventType(sc scanner) (core.EventType, error) {
	var et core.EventType
	var archived, deprecated int
	var flags, schemas string
	var c, u int64
	if err := sc.Scan(&et.Name, &et.Description, &archived, &deprecated, &et.GroupName, &flags, &schemas, &c, &u); err != nil {
		return et, err
	}
	if err := json.Unmarshal([]byte(flags), &et.FeatureFlags); err != nil {
		return et, fmt.Errorf("event type %s feature_flags: %w", et.Name, err)
	}
	if schemas != "" {
		et.Schemas = []byte(schemas)
	}
	et.Archived, et.Deprecated = archived != 0, deprecated != 0
	et.CreatedAt, et.UpdatedAt = tm(c), tm(u)
	return et, nil
}

func flagsJSON(f []string) string {
	if f == nil {
		f = []string{}
	}
	b, _ := json.Marshal(f)
	return string(b)
}

func (s *Store) EventTypeCreate(ctx context.Context, et core.EventType) error {
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO event_types (`+eventTypeColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			et.Name, et.Description, b2i(et.Archived), b2i(et.Deprecated), et.GroupName, flagsJSON(et.FeatureFlags),
			string(et.Schemas), ns(et.CreatedAt), ns(et.UpdatedAt))
		return err
	}))
}

func (s *Store) EventTypeGet(ctx context.Context, name string) (core.EventType, error) {
	et, err := scanEventType(s.r.QueryRowContext(ctx, `SELECT `+eventTypeColumns+` FROM event_types WHERE name = ?`, name))
	if err != nil {
		return core.EventType{}, mapErr(err)
	}
	return et, nil
}

func (s *Store) EventTypeList(ctx context.Context, p store.EventTypeListParams) (store.Page[core.EventType], error) {
	limit := store.PageLimit(p.Limit)
	rows, err := s.r.QueryContext(ctx, `SELECT `+eventTypeColumns+` FROM event_types
		WHERE name > ? AND (? OR archived = 0) ORDER BY name LIMIT ?`, p.Cursor, p.IncludeArchived, limit+1)
	if err != nil {
		return store.Page[core.EventType]{}, mapErr(err)
	}
	defer rows.Close()
	out := []core.EventType{}
	for rows.Next() {
		et, err := scanEventType(rows)
		if err != nil {
			return store.Page[core.EventType]{}, err
		}
		out = append(out, et)
	}
	if err := rows.Err(); err != nil {
		return store.Page[core.EventType]{}, mapErr(err)
	}
	return store.PageOf(out, limit, func(et core.EventType) string { return et.Name }), nil
}

func (s *Store) EventTypeUpdate(ctx context.Context, et core.EventType) error {
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE event_types SET description = ?, archived = ?, deprecated = ?,
			group_name = ?, feature_flags = ?, schemas = ?, updated_at = ? WHERE name = ?`,
			et.Description, b2i(et.Archived), b2i(et.Deprecated), et.GroupName, flagsJSON(et.FeatureFlags),
			string(et.Schemas), ns(et.UpdatedAt), et.Name)
		return mustAffect(res, err)
	}))
}

func (s *Store) EventTypeDelete(ctx context.Context, name string) error {
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM event_types WHERE name = ?`, name)
		return mustAffect(res, err)
	}))
}
