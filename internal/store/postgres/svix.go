package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"hookd/internal/core"
	"hookd/internal/store"
)

func (s *Store) SubscriptionByUID(ctx context.Context, tenantID, uid string) (core.Subscription, error) {
	if uid == "" {
		return core.Subscription{}, store.ErrNotFound
	}
	sub, err := s.scanSub(s.pool.QueryRow(ctx, `SELECT `+subColumns+` FROM subscriptions
		WHERE tenant_id = $1 AND uid = $2 AND deleted_at IS NULL`, tenantID, uid))
	if err != nil {
		return core.Subscription{}, mapErr(err)
	}
	return sub, nil
}

// where builds a WHERE clause of numbered parameters.
type where struct {
	conds []string
	args  []any
}

func (w *where) add(cond string, args ...any) {
	for _, a := range args {
		w.args = append(w.args, a)
		cond = strings.Replace(cond, "?", "$"+strconv.Itoa(len(w.args)), 1)
	}
	w.conds = append(w.conds, cond)
}

func (w *where) sql() string {
	if len(w.conds) == 0 {
		return "true"
	}
	return strings.Join(w.conds, " AND ")
}

var attemptRowColumns = `a.n, a.started_at, a.duration_ns, a.status_code, a.error, a.response, d.` +
	strings.ReplaceAll(strings.Join(strings.Fields(deliveryColumns), " "), ", ", ", d.")

func (s *Store) AttemptList(ctx context.Context, p store.AttemptListParams) (store.Page[store.AttemptRow], error) {
	limit := store.PageLimit(p.Limit)
	var w where
	if p.SubscriptionID != "" {
		w.add(`d.subscription_id = ?`, p.SubscriptionID)
	}
	if p.EventID != "" {
		w.add(`d.event_id = ?`, p.EventID)
	}
	if p.TenantID != "" {
		w.add(`d.tenant_id = ?`, p.TenantID)
	}
	if !p.Since.IsZero() {
		w.add(`a.started_at >= ?`, p.Since)
	}
	if !p.Until.IsZero() {
		w.add(`a.started_at < ?`, p.Until)
	}
	if p.Cursor != "" {
		dlv, nStr, ok := strings.Cut(p.Cursor, ".")
		n, err := strconv.Atoi(nStr)
		if !ok || err != nil {
			return store.Page[store.AttemptRow]{}, fmt.Errorf("attempt cursor %q: %w", p.Cursor, store.ErrInvalidCursor)
		}
		w.add(`(a.delivery_id, a.n) < (?, ?)`, dlv, n)
	}
	w.args = append(w.args, limit+1)
	rows, err := s.pool.Query(ctx, `SELECT `+attemptRowColumns+` FROM attempts a JOIN deliveries d ON d.id = a.delivery_id
		WHERE `+w.sql()+` ORDER BY a.delivery_id DESC, a.n DESC LIMIT $`+strconv.Itoa(len(w.args)), w.args...)
	if err != nil {
		return store.Page[store.AttemptRow]{}, mapErr(err)
	}
	defer rows.Close()
	out := []store.AttemptRow{}
	for rows.Next() {
		var r store.AttemptRow
		var started, next, c, u pgtype.Timestamptz
		var dur int64
		d := &r.Delivery
		if err := rows.Scan(&r.Attempt.N, &started, &dur, &r.Attempt.StatusCode, &r.Attempt.Error, &r.Attempt.Response,
			&d.ID, &d.EventID, &d.SubscriptionID, &d.TenantID, &d.EventType, &d.Host,
			&d.Shard, &d.State, &d.AttemptCount, &d.RoundStart, &next, &d.LastStatus, &d.LastError,
			&d.Sequence, &c, &u, &d.OrderingKey); err != nil {
			return store.Page[store.AttemptRow]{}, err
		}
		d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = tm(next), tm(c), tm(u)
		r.Attempt.DeliveryID, r.Attempt.StartedAt, r.Attempt.Duration = d.ID, tm(started), time.Duration(dur)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return store.Page[store.AttemptRow]{}, mapErr(err)
	}
	return store.PageOf(out, limit, store.AttemptRow.Cursor), nil
}

const eventTypeColumns = `name, description, archived, deprecated, group_name, feature_flags, schemas, created_at, updated_at`

func scanEventType(row pgx.Row) (core.EventType, error) {
	var et core.EventType
	var schemas string
	var c, u pgtype.Timestamptz
	if err := row.Scan(&et.Name, &et.Description, &et.Archived, &et.Deprecated, &et.GroupName, &et.FeatureFlags,
		&schemas, &c, &u); err != nil {
		return et, err
	}
	if schemas != "" {
		et.Schemas = []byte(schemas)
	}
	et.CreatedAt, et.UpdatedAt = tm(c), tm(u)
	return et, nil
}

func (s *Store) EventTypeCreate(ctx context.Context, et core.EventType) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO event_types (`+eventTypeColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		et.Name, et.Description, et.Archived, et.Deprecated, et.GroupName, orEmpty(et.FeatureFlags), string(et.Schemas),
		et.CreatedAt, et.UpdatedAt)
	return mapErr(err)
}

func (s *Store) EventTypeGet(ctx context.Context, name string) (core.EventType, error) {
	et, err := scanEventType(s.pool.QueryRow(ctx, `SELECT `+eventTypeColumns+` FROM event_types WHERE name = $1`, name))
	if err != nil {
		return core.EventType{}, mapErr(err)
	}
	return et, nil
}

func (s *Store) EventTypeList(ctx context.Context, p store.EventTypeListParams) (store.Page[core.EventType], error) {
	limit := store.PageLimit(p.Limit)
	rows, err := s.pool.Query(ctx, `SELECT `+eventTypeColumns+` FROM event_types
		WHERE name > $1 AND ($2 OR NOT archived) ORDER BY name LIMIT $3`, p.Cursor, p.IncludeArchived, limit+1)
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
	tag, err := s.pool.Exec(ctx, `UPDATE event_types SET description = $2, archived = $3, deprecated = $4,
		group_name = $5, feature_flags = $6, schemas = $7, updated_at = $8 WHERE name = $1`,
		et.Name, et.Description, et.Archived, et.Deprecated, et.GroupName, orEmpty(et.FeatureFlags), string(et.Schemas), et.UpdatedAt)
	if err != nil {
		return mapErr(err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}

func (s *Store) EventTypeDelete(ctx context.Context, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM event_types WHERE name = $1`, name)
	if err != nil {
		return mapErr(err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}
