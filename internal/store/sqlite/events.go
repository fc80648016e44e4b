package sqlite

import (
	"context"
	"database/sql"
	"errors"

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

// batchStmts are the hot statements bound to one EventInsertBatch transaction.
type batchStmts struct {
	findKey, insEvent, subState, nextSeq *sql.Stmt
	// deliveryArgs collects the batch's delivery rows; they are written
	// after every event, a chunk of rows per statement.
	deliveryArgs []any
}

func (s *Store) prepareBatch(ctx context.Context, tx *sql.Tx) (*batchStmts, error) {
	var b batchStmts
	for _, p := range []struct {
		st  **sql.Stmt
		sql string
	}{
		{&b.findKey, findKeySQL},
		{&b.insEvent, insertEventSQL},
		{&b.subState, subStateSQL},
		{&b.nextSeq, nextSeqSQL},
	} {
		st, err := s.inTx(ctx, tx, p.sql)
		if err != nil {
			b.close()
			return nil, err
		}
		*p.st = st
	}
	return &b, nil
}

func (b *batchStmts) close() {
	for _, st := range []*sql.Stmt{b.findKey, b.insEvent, b.subState, b.nextSeq} {
		if st != nil {
			st.Close()
		}
	}
}

func (s *Store) EventInsertBatch(ctx context.Context, batch []store.EventInsert) ([]store.EventInsertResult, error) {
	if len(batch) == 0 {
		return []store.EventInsertResult{}, nil
	}
	var out []store.EventInsertResult
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		st, err := s.prepareBatch(ctx, tx)
		if err != nil {
			return err
		}
		defer st.close()
		n := 0
		for _, in := range batch {
			n += len(in.Deliveries)
		}
		st.deliveryArgs = make([]any, 0, n*insertDeliveries.cols)
		out = make([]store.EventInsertResult, 0, len(batch))
		subs := map[string]subAtCommit{} // looked up once per subscription per batch
		for _, in := range batch {
			r, err := insertOne(ctx, st, subs, in)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return s.execRows(ctx, tx, insertDeliveries, st.deliveryArgs)
	})
	if err != nil {
		return nil, mapErr(err)
	}
	return out, nil
}

// subAtCommit is what a batch needs of a subscription.
type subAtCommit struct {
	ordered bool
	skip    string // why its deliveries given pending are written skipped; "" if not
}

// subState reads a subscription once per batch, from the write transaction.
func subState(ctx context.Context, st *batchStmts, subs map[string]subAtCommit, id string) (subAtCommit, error) {
	if sa, ok := subs[id]; ok {
		return sa, nil
	}
	var ordered, deleted int
	var state string
	err := st.subState.QueryRowContext(ctx, id).Scan(&ordered, &state, &deleted)
	// No such subscription: the delivery insert fails on its foreign key
	// and takes the batch down with it.
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return subAtCommit{}, err
	}
	sa := subAtCommit{ordered: ordered != 0, skip: store.SkipReason(core.SubscriptionState(state), deleted != 0)}
	subs[id] = sa
	return sa, nil
}

// insertOne writes one event and its deliveries inside the batch transaction.
// The idempotency lookup sees rows written earlier in the same transaction,
// so duplicates within a batch resolve exactly like duplicates across batches.
func insertOne(ctx context.Context, st *batchStmts, subs map[string]subAtCommit, in store.EventInsert) (store.EventInsertResult, error) {
	ev := in.Event
	if ev.IdempotencyKey != "" {
		var first string
		err := st.findKey.QueryRowContext(ctx, ev.TenantID, ev.IdempotencyKey).Scan(&first)
		if err == nil {
			return store.EventInsertResult{EventID: first, Duplicate: true}, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return store.EventInsertResult{}, err
		}
	}
	payload := ev.Payload
	if payload == nil {
		payload = []byte{} // NOT NULL column
	}
	if _, err := st.insEvent.ExecContext(ctx, ev.ID, ev.TenantID, ev.Type, payload,
		ev.IdempotencyKey, ev.OrderingKey, ns(ev.CreatedAt)); err != nil {
		return store.EventInsertResult{}, err
	}
	ds := make([]core.Delivery, len(in.Deliveries))
	copy(ds, in.Deliveries)
	for i := range ds {
		d := &ds[i]
		d.Sequence, d.OrderingKey = 0, ev.OrderingKey
		sa, err := subState(ctx, st, subs, d.SubscriptionID)
		if err != nil {
			return store.EventInsertResult{}, err
		}
		if d.State == core.DeliveryPending && sa.skip != "" {
			d.State, d.LastError = core.DeliverySkipped, sa.skip
		}
		if ev.OrderingKey != "" && sa.ordered {
			if err := st.nextSeq.QueryRowContext(ctx, d.SubscriptionID, ev.OrderingKey).Scan(&d.Sequence); err != nil {
				return store.EventInsertResult{}, err
			}
		}
		st.deliveryArgs = append(appendDeliveryArgs(st.deliveryArgs, d), ns(d.CreatedAt))
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
