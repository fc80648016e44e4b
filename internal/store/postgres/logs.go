package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"hookd/internal/core"
	"hookd/internal/store"
)

// The tenant-wide logs walk events_tenant_time, (tenant_id, created_at, id)
// (events_tenant_type with a type), backwards: a time range is a range of
// the index, and the cursor a row comparison the index seeks to.
// Deliveries are found through their event (the (event_id,
// subscription_id) key): events are only inserted, so their indexes cost
// nothing after, where an index on deliveries would take an entry on every
// result that moves a state (not a HOT update).

// query collects a WHERE clause and its numbered arguments.
type query struct {
	sql  string
	args []any
}

func (q *query) and(cond string, v any) {
	q.args = append(q.args, v)
	q.sql += fmt.Sprintf(" AND "+cond, len(q.args))
}

// timeRange adds the bounds on prefix+created_at, the cursor (a row
// comparison of the time and keys), the newest-first order and the
// page's limit.
func (q *query) timeRange(prefix string, keys []string, since, until time.Time, cursor string, limit int) error {
	if !since.IsZero() {
		q.and(prefix+"created_at >= $%d", since)
	}
	if !until.IsZero() {
		q.and(prefix+"created_at < $%d", until)
	}
	if cursor != "" {
		t, ids, err := store.ParseTimeCursor(cursor, len(keys))
		if err != nil {
			return fmt.Errorf("postgres: cursor %q: %w", cursor, err)
		}
		q.args = append(q.args, t)
		params := []string{fmt.Sprintf("$%d", len(q.args))}
		for _, id := range ids {
			q.args = append(q.args, id)
			params = append(params, fmt.Sprintf("$%d", len(q.args)))
		}
		q.sql += " AND (" + prefix + "created_at, " + strings.Join(keys, ", ") + ") < (" + strings.Join(params, ", ") + ")"
		if len(keys) > 1 {
			// The same bound on the outer table alone, which its index can seek to.
			q.sql += " AND (" + prefix + "created_at, " + keys[0] + ") <= (" + params[0] + ", " + params[1] + ")"
		}
	}
	order := []string{prefix + "created_at DESC"}
	for _, k := range keys {
		order = append(order, k+" DESC")
	}
	q.args = append(q.args, limit+1)
	q.sql += fmt.Sprintf(" ORDER BY %s LIMIT $%d", strings.Join(order, ", "), len(q.args))
	return nil
}

// eventListQuery builds EventList's query; tests check its plan.
func eventListQuery(p store.EventListParams) (query, error) {
	payload := `''::bytea`
	if p.WithPayload {
		payload = `payload`
	}
	q := query{sql: `SELECT id, tenant_id, type, idempotency_key, ordering_key, created_at, ` + payload + ` FROM events WHERE tenant_id = $1`,
		args: []any{p.TenantID}}
	switch len(p.Types) {
	case 0:
	case 1:
		q.and("type = $%d", p.Types[0])
	default:
		q.and("type = ANY($%d::text[])", p.Types)
	}
	if p.IdempotencyKey != "" {
		q.and("id IN (SELECT event_id FROM event_keys WHERE tenant_id = $1 AND idempotency_key = $%d)", p.IdempotencyKey)
	}
	return q, q.timeRange("", []string{"id"}, p.Since, p.Until, p.Cursor, store.PageLimit(p.Limit))
}

func (s *Store) EventList(ctx context.Context, p store.EventListParams) (store.Page[core.Event], error) {
	q, err := eventListQuery(p)
	if err != nil {
		return store.Page[core.Event]{}, err
	}
	rows, err := s.pool.Query(ctx, q.sql, q.args...)
	if err != nil {
		return store.Page[core.Event]{}, mapErr(err)
	}
	evs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (core.Event, error) {
		var ev core.Event
		var c pgtype.Timestamptz
		err := row.Scan(&ev.ID, &ev.TenantID, &ev.Type, &ev.IdempotencyKey, &ev.OrderingKey, &c, &ev.Payload)
		ev.CreatedAt = tm(c)
		return ev, err
	})
	if err != nil {
		return store.Page[core.Event]{}, mapErr(err)
	}
	if evs == nil {
		evs = []core.Event{}
	}
	return store.PageOf(evs, store.PageLimit(p.Limit), func(e core.Event) string { return store.TimeCursor(e.CreatedAt, e.ID) }), nil
}

// eventTypesQuery skips through events_tenant_type from one type to the
// next: each step one seek, however many events a type has.
const eventTypesQuery = `WITH RECURSIVE t(type) AS (
		SELECT (SELECT min(type) FROM events WHERE tenant_id = $1 AND type > $2)
		UNION ALL
		SELECT (SELECT min(type) FROM events WHERE tenant_id = $1 AND type > t.type) FROM t WHERE t.type IS NOT NULL
	) SELECT type FROM t WHERE type IS NOT NULL LIMIT $3`

func (s *Store) EventTypesSent(ctx context.Context, tenantID, after string, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, eventTypesQuery, tenantID, after, limit)
	if err != nil {
		return nil, mapErr(err)
	}
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return types, mapErr(err)
}

// deliveryListTenantQuery builds DeliveryListTenant's query, with the
// event's creation time last (for the cursor); tests check its plan.
func deliveryListTenantQuery(p store.DeliveryListParams) (query, error) {
	q := query{sql: `SELECT ` + qualified(deliveryColumns, "d") + `, e.created_at FROM events e
		JOIN deliveries d ON d.event_id = e.id WHERE e.tenant_id = $1`, args: []any{p.TenantID}}
	if p.EventType != "" {
		q.and("e.type = $%d", p.EventType)
	}
	if p.SubscriptionID != "" {
		q.and("d.subscription_id = $%d", p.SubscriptionID)
	}
	if p.State != "" {
		q.and("d.state = $%d", string(p.State))
	}
	if p.Status != 0 {
		q.and("d.last_status = $%d", p.Status)
	}
	return q, q.timeRange("e.", []string{"e.id", "d.subscription_id"}, p.Since, p.Until, p.Cursor, store.PageLimit(p.Limit))
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
		return store.Page[core.Delivery]{}, fmt.Errorf("postgres: DeliveryListTenant needs a tenant")
	}
	q, err := deliveryListTenantQuery(p)
	if err != nil {
		return store.Page[core.Delivery]{}, err
	}
	rows, err := s.pool.Query(ctx, q.sql, q.args...)
	if err != nil {
		return store.Page[core.Delivery]{}, mapErr(err)
	}
	defer rows.Close()
	ds, created := []core.Delivery{}, map[string]time.Time{}
	for rows.Next() {
		var c pgtype.Timestamptz
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

// DeliveryCount walks the subscription's deliveries as a bulk replay
// does, stopping at Max.
func (s *Store) DeliveryCount(ctx context.Context, p store.DeliveryCountParams) (int, error) {
	states := make([]string, len(p.States))
	for i, st := range p.States {
		states[i] = string(st)
	}
	types := p.EventTypes
	if types == nil {
		types = []string{}
	}
	var n int
	err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM (SELECT 1 FROM deliveries
			WHERE subscription_id = s.id AND state = ANY($3)
			AND created_at >= $4 AND ($5::timestamptz IS NULL OR created_at < $5)
			AND (cardinality($6::text[]) = 0 OR event_type = ANY($6))
			LIMIT $7) AS m)
		FROM subscriptions s WHERE s.id = $1 AND s.deleted_at IS NULL AND ($2 = '' OR s.tenant_id = $2)`,
		p.SubscriptionID, p.TenantID, states, p.Since, ts(p.Until), types, p.Max).Scan(&n)
	if err != nil {
		return 0, mapErr(err)
	}
	return n, nil
}
