package sqlite

import (
	"context"
	"database/sql"

	zs "zombiezen.com/go/sqlite"

	"hookd/internal/core"
	"hookd/internal/store"
)

const deliveryColumns = `id, event_id, subscription_id, tenant_id, event_type, host, shard, state,
	attempt_count, round_start, next_attempt_at, last_status, last_error, sequence, created_at, updated_at,
	ordering_key`

const (
	findKeySQL     = `SELECT id FROM events WHERE tenant_id = ? AND idempotency_key = ? AND idempotency_key <> ''`
	insertEventSQL = `INSERT INTO events (id, tenant_id, type, payload, idempotency_key, ordering_key, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`
	// subStateSQL runs in the write transaction, which SubscriptionUpdate
	// and SubscriptionDelete also need: what it reads holds at commit.
	subStateSQL = `SELECT ordered, state, deleted_at IS NOT NULL FROM subscriptions WHERE id = ?`
	nextSeqSQL  = `INSERT INTO ordering_sequences (subscription_id, ordering_key, last_sequence) VALUES (?, ?, 1)
		ON CONFLICT (subscription_id, ordering_key) DO UPDATE SET last_sequence = last_sequence + 1
		RETURNING last_sequence`
)

var insertDeliveries = newMultiRow(
	`INSERT INTO deliveries (`+deliveryColumns+`, round_started_at) VALUES`,
	`(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
	"",
	18)

func (s *Store) EventInsertBatch(ctx context.Context, batch []store.EventInsert) ([]store.EventInsertResult, error) {
	if len(batch) == 0 {
		return []store.EventInsertResult{}, nil
	}
	var out []store.EventInsertResult
	err := s.batch(ctx, func(c *zs.Conn) error {
		n := 0
		for _, in := range batch {
			n += len(in.Deliveries)
		}
		// The batch's delivery rows are written after every event, a chunk
		// of rows per statement.
		rows := make([]any, 0, n*insertDeliveries.cols)
		out = make([]store.EventInsertResult, 0, len(batch))
		subs := map[string]subAtCommit{} // looked up once per subscription per batch
		for _, in := range batch {
			r, err := insertOne(c, subs, in, &rows)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		_, err := execRows(c, insertDeliveries, rows)
		return err
	})
	if err != nil {
		return nil, mapErr(err)
	}
	s.rides.wrote()
	return out, nil
}

// subAtCommit is what a batch needs of a subscription.
type subAtCommit struct {
	ordered bool
	skip    string // why its deliveries given pending are written skipped; "" if not
}

// subState reads a subscription once per batch, from the write transaction.
func subState(c *zs.Conn, subs map[string]subAtCommit, id string) (subAtCommit, error) {
	if sa, ok := subs[id]; ok {
		return sa, nil
	}
	var ordered, deleted bool
	var state string
	// No such subscription: the delivery insert fails on its foreign key
	// and takes the batch down with it.
	if _, err := queryRowDirect(c, subStateSQL, []any{id}, func(st *zs.Stmt) {
		ordered, state, deleted = st.ColumnBool(0), st.ColumnText(1), st.ColumnBool(2)
	}); err != nil {
		return subAtCommit{}, err
	}
	sa := subAtCommit{ordered: ordered, skip: store.SkipReason(core.SubscriptionState(state), deleted)}
	subs[id] = sa
	return sa, nil
}

// insertOne writes one event inside the batch transaction and appends its
// deliveries' rows to rows. The idempotency lookup sees rows written
// earlier in the same transaction, so duplicates within a batch resolve
// exactly like duplicates across batches.
func insertOne(c *zs.Conn, subs map[string]subAtCommit, in store.EventInsert, rows *[]any) (store.EventInsertResult, error) {
	ev := in.Event
	if ev.IdempotencyKey != "" {
		var first string
		found, err := queryRowDirect(c, findKeySQL, []any{ev.TenantID, ev.IdempotencyKey}, func(st *zs.Stmt) {
			first = st.ColumnText(0)
		})
		if err != nil {
			return store.EventInsertResult{}, err
		}
		if found {
			return store.EventInsertResult{EventID: first, Duplicate: true}, nil
		}
	}
	payload := ev.Payload
	if payload == nil {
		payload = []byte{} // NOT NULL column
	}
	if _, err := execDirect(c, insertEventSQL, ev.ID, ev.TenantID, ev.Type, payload,
		ev.IdempotencyKey, ev.OrderingKey, ns(ev.CreatedAt)); err != nil {
		return store.EventInsertResult{}, err
	}
	ds := make([]core.Delivery, len(in.Deliveries))
	copy(ds, in.Deliveries)
	for i := range ds {
		d := &ds[i]
		d.Sequence, d.OrderingKey = 0, ev.OrderingKey
		sa, err := subState(c, subs, d.SubscriptionID)
		if err != nil {
			return store.EventInsertResult{}, err
		}
		if d.State == core.DeliveryPending && sa.skip != "" {
			d.State, d.LastError = core.DeliverySkipped, sa.skip
		}
		if ev.OrderingKey != "" && sa.ordered {
			if _, err := queryRowDirect(c, nextSeqSQL, []any{d.SubscriptionID, ev.OrderingKey}, func(st *zs.Stmt) {
				d.Sequence = st.ColumnInt64(0)
			}); err != nil {
				return store.EventInsertResult{}, err
			}
		}
		*rows = append(appendDeliveryArgs(*rows, d), ns(d.CreatedAt))
	}
	return store.EventInsertResult{EventID: ev.ID, Deliveries: ds}, nil
}

func appendDeliveryArgs(args []any, d *core.Delivery) []any {
	return append(args, d.ID, d.EventID, d.SubscriptionID, d.TenantID, d.EventType, d.Host, d.Shard,
		string(d.State), d.AttemptCount, d.RoundStart, ns(d.NextAttemptAt), d.LastStatus, d.LastError,
		d.Sequence, ns(d.CreatedAt), ns(d.UpdatedAt), d.OrderingKey)
}

func scanDelivery(sc scanner) (core.Delivery, error) {
	var d core.Delivery
	var next, c, u int64
	if err := sc.Scan(&d.ID, &d.EventID, &d.SubscriptionID, &d.TenantID, &d.EventType, &d.Host,
		&d.Shard, &d.State, &d.AttemptCount, &d.RoundStart, &next, &d.LastStatus, &d.LastError,
		&d.Sequence, &c, &u, &d.OrderingKey); err != nil {
		return d, err
	}
	d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = tm(next), tm(c), tm(u)
	return d, nil
}

func collectDeliveries(rows *sql.Rows) ([]core.Delivery, error) {
	defer rows.Close()
	ds := []core.Delivery{}
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return ds, rows.Err()
}

const eventColumns = `id, tenant_id, type, payload, idempotency_key, ordering_key, created_at`

func scanEvent(sc scanner, ev *core.Event) error {
	var c int64
	if err := sc.Scan(&ev.ID, &ev.TenantID, &ev.Type, &ev.Payload, &ev.IdempotencyKey, &ev.OrderingKey, &c); err != nil {
		return err
	}
	ev.CreatedAt = tm(c)
	return nil
}

func (s *Store) EventGet(ctx context.Context, tenantID, id string) (core.Event, []core.Delivery, error) {
	// One read transaction: the event and its deliveries come from one snapshot.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return core.Event{}, nil, err
	}
	defer tx.Rollback()
	var ev core.Event
	err = scanEvent(tx.QueryRowContext(ctx, `SELECT `+eventColumns+` FROM events
		WHERE id = ? AND (? = '' OR tenant_id = ?)`, id, tenantID, tenantID), &ev)
	if err != nil {
		return core.Event{}, nil, mapErr(err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT `+deliveryColumns+` FROM deliveries WHERE event_id = ? ORDER BY id`, id)
	if err != nil {
		return core.Event{}, nil, err
	}
	ds, err := collectDeliveries(rows)
	if err != nil {
		return core.Event{}, nil, err
	}
	return ev, ds, nil
}
