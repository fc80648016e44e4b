package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// The tenant-wide logs walk events_tenant_time, (tenant_id, created_at, id)
// (events_tenant_type with a type), backwards: a time range is a range of
// the index, and the cursor a row value the index seeks to. Deliveries are
// found through their event (the (event_id, subscription_id) key): events
// are only inserted, so their indexes cost nothing after, where an index
// on deliveries would be written again by every result.

// eventListQuery builds EventList's query; tests check its plan.
func eventListQuery(p store.EventListParams) (string, []any, error) {
	payload := `''`
	if p.WithPayload {
		payload = `payload`
	}
	q := `SELECT id, tenant_id, type, idempotency_key, ordering_key, created_at, ` + payload + ` FROM events WHERE tenant_id = ?`
	args := []any{p.TenantID}
	if len(p.Types) > 0 {
		q += ` AND type IN (?` + strings.Repeat(`, ?`, len(p.Types)-1) + `)`
		for _, t := range p.Types {
			args = append(args, t)
		}
	}
	if p.IdempotencyKey != "" {
		q += ` AND idempotency_key = ? AND idempotency_key <> ''` // as events_idempotency has it
		args = append(args, p.IdempotencyKey)
	}
	q, args, err := timeRange(q, args, "", []string{"id"}, p.Since, p.Until, p.Cursor)
	return q + ` ORDER BY created_at DESC, id DESC LIMIT ?`, append(args, store.PageLimit(p.Limit)+1), err
}

func (s *Store) EventList(ctx context.Context, p store.EventListParams) (store.Page[core.Event], error) {
	q, args, err := eventListQuery(p)
	if err != nil {
		return store.Page[core.Event]{}, err
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return store.Page[core.Event]{}, mapErr(err)
	}
	defer rows.Close()
	evs := []core.Event{}
	for rows.Next() {
		var ev core.Event
		var c int64
		if err := rows.Scan(&ev.ID, &ev.TenantID, &ev.Type, &ev.IdempotencyKey, &ev.OrderingKey, &c, &ev.Payload); err != nil {
			return store.Page[core.Event]{}, mapErr(err)
		}
		ev.CreatedAt = tm(c)
		evs = append(evs, ev)
	}
	if err := rows.Err(); err != nil {
		return store.Page[core.Event]{}, mapErr(err)
	}
	return store.PageOf(evs, store.PageLimit(p.Limit), func(e core.Event) string { return store.TimeCursor(e.CreatedAt, e.ID) }), nil
}

// eventTypesQuery skips through events_tenant_type from one type to the
// next: each step one seek, however many events a type has.
const eventTypesQuery = `WITH RECURSIVE t(type) AS (
		SELECT (SELECT min(type) FROM events WHERE tenant_id = ?1 AND type > ?2)
		UNION ALL
		SELECT (SELECT min(type) FROM events WHERE tenant_id = ?1 AND type > t.type) FROM t WHERE t.type IS NOT NULL
	) SELECT type FROM t WHERE type IS NOT NULL LIMIT ?3`

func (s *Store) EventTypesSent(ctx context.Context, tenantID, after string, limit int) ([]string, error) {
	types, err := queryStrings(ctx, s.r, eventTypesQuery, tenantID, after, limit)
	return types, mapErr(err)
}

// deliveryListTenantQuery builds DeliveryListTenant's query, with the
// event's creation time last (for the cursor); tests check its plan.
func deliveryListTenantQuery(p store.DeliveryListParams) (string, []any, error) {
	index := "events_tenant_time"
	if p.EventType != "" {
		index = "events_tenant_type"
	}
	q := `SELECT ` + qualified(deliveryColumns, "d") + `, e.created_at FROM events e INDEXED BY ` + index + `
		JOIN deliveries d ON d.event_id = e.id WHERE e.tenant_id = ?`
	args := []any{p.TenantID}
	for _, f := range []struct {
		col string
		v   any
		set bool
	}{
		{"e.type", p.EventType, p.EventType != ""},
		{"d.subscription_id", p.SubscriptionID, p.SubscriptionID != ""},
		{"d.state", string(p.State), p.State != ""},
		{"d.last_status", p.Status, p.Status != 0},
	} {
		if f.set {
			q += ` AND ` + f.col + ` = ?`
			args = append(args, f.v)
		}
	}
	q, args, err := timeRange(q, args, "e.", []string{"e.id", "d.subscription_id"}, p.Since, p.Until, p.Cursor)
	return q + ` ORDER BY e.created_at DESC, e.id DESC, d.subscription_id DESC LIMIT ?`, append(args, store.PageLimit(p.Limit)+1), err
}

// qualified prefixes each of a list of columns with a table's alias.
func qualified(columns, alias string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = alias + "." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

func (s *Store) DeliveryListTenant(ctx context.Context, p store.DeliveryListParams) (store.Page[core.Delivery], error) {
	if p.TenantID == "" {
		return store.Page[core.Delivery]{}, fmt.Errorf("sqlite: DeliveryListTenant needs a tenant")
	}
	q, args, err := deliveryListTenantQuery(p)
	if err != nil {
		return store.Page[core.Delivery]{}, err
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return store.Page[core.Delivery]{}, mapErr(err)
	}
	defer rows.Close()
	ds, created := []core.Delivery{}, map[string]time.Time{}
	for rows.Next() {
		var c int64
		d, err := scanDelivery(withExtra(rows, &c))
		if err != nil {
			return store.Page[core.Delivery]{}, mapErr(err)
		}
		ds, created[d.ID] = append(ds, d), tm(c)
	}
	if err := rows.Err(); err != nil {
		return store.Page[core.Delivery]{}, mapErr(err)
	}
	return store.PageOf(ds, store.PageLimit(p.Limit), func(d core.Delivery) string {
		return store.TimeCursor(created[d.ID], d.EventID, d.SubscriptionID)
	}), nil
}

// timeRange adds the bounds on prefix+created_at and the cursor: a row
// value of the time and keys, seeking in the index.
func timeRange(q string, args []any, prefix string, keys []string, since, until time.Time, cursor string) (string, []any, error) {
	if !since.IsZero() {
		q += ` AND ` + prefix + `created_at >= ?`
		args = append(args, ns(since))
	}
	if !until.IsZero() {
		q += ` AND ` + prefix + `created_at < ?`
		args = append(args, ns(until))
	}
	if cursor != "" {
		t, ids, err := store.ParseTimeCursor(cursor, len(keys))
		if err != nil {
			return q, args, fmt.Errorf("sqlite: cursor %q: %w", cursor, err)
		}
		q += ` AND (` + prefix + `created_at, ` + strings.Join(keys, ", ") + `) < (?` + strings.Repeat(", ?", len(keys)) + `)`
		args = append(args, ns(t))
		for _, id := range ids {
			args = append(args, id)
		}
		if len(keys) > 1 {
			// The same bound on the outer table alone, which its index can seek to.
			q += ` AND (` + prefix + `created_at, ` + keys[0] + `) <= (?, ?)`
			args = append(args, ns(t), ids[0])
		}
	}
	return q, args, nil
}

// deliveryCountSQL counts up to ?7 of a live subscription's deliveries in a
// time range, as a bulk replay walks them (deliveries_subscription_created).
const deliveryCountSQL = `SELECT (SELECT count(*) FROM (SELECT 1 FROM deliveries INDEXED BY deliveries_subscription_created
		WHERE subscription_id = s.id AND state IN (SELECT value FROM json_each(?3))
		AND created_at >= ?4 AND (?5 = 0 OR created_at < ?5)
		AND (json_array_length(?6) = 0 OR event_type IN (SELECT value FROM json_each(?6)))
		LIMIT ?7))
		FROM subscriptions s WHERE s.id = ?1 AND s.deleted_at IS NULL AND (?2 = '' OR s.tenant_id = ?2)`

// DeliveryCount counts, stopping at Max.
func (s *Store) DeliveryCount(ctx context.Context, p store.DeliveryCountParams) (int, error) {
	states, err := json.Marshal(p.States)
	if err != nil {
		return 0, err
	}
	types := p.EventTypes
	if types == nil {
		types = []string{}
	}
	et, err := json.Marshal(types)
	if err != nil {
		return 0, err
	}
	var n int
	err = s.r.QueryRowContext(ctx, deliveryCountSQL,
		p.SubscriptionID, p.TenantID, string(states), ns(p.Since), ns(p.Until), string(et), p.Max).Scan(&n)
	if err != nil {
		return 0, mapErr(err)
	}
	return n, nil
}
