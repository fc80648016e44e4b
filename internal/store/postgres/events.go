package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"hookd/internal/core"
	"hookd/internal/store"
)

const deliveryColumns = `id, event_id, subscription_id, tenant_id, event_type, host, shard, state,
	attempt_count, round_start, next_attempt_at, last_status, last_error, sequence, created_at, updated_at,
	ordering_key`

// The outbox write sends each table's rows as one array per column and
// unnests them server-side: a batch of any size is one statement per table.
const (
	// event_keys is the arbiter of a key (migration 0017): an event is
	// written if it has no key or its key's row was, so concurrent writers
	// of one key (on any node) wait on that row and only one event lands.
	insertEventsSQL = `WITH u AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::text[], $7::timestamptz[])
				AS u(id, tenant_id, type, payload, idempotency_key, ordering_key, created_at)),
		k AS (INSERT INTO event_keys (tenant_id, idempotency_key, event_id)
			SELECT tenant_id, idempotency_key, id FROM u WHERE idempotency_key <> ''
			ON CONFLICT DO NOTHING RETURNING event_id)
		INSERT INTO events (id, tenant_id, type, payload, idempotency_key, ordering_key, created_at)
		SELECT * FROM u WHERE idempotency_key = '' OR id IN (SELECT event_id FROM k)
		RETURNING id`
	findKeysSQL = `SELECT k.event_id, k.tenant_id, k.idempotency_key
		FROM unnest($1::text[], $2::text[]) AS q(tenant_id, idempotency_key)
		JOIN event_keys k ON k.tenant_id = q.tenant_id AND k.idempotency_key = q.idempotency_key`
	// lockSubsSQL reads the batch's subscriptions as they are at commit.
	// FOR SHARE, not the foreign key's FOR KEY SHARE: only FOR SHARE
	// conflicts with the FOR NO KEY UPDATE of SubscriptionUpdate and
	// SubscriptionDelete, so a change either waits for this commit (and its
	// skip, run after, sees these deliveries) or commits first and is read
	// here. Locked in ID order before anything else of the batch: an ingest
	// waiting on a change holds only share locks, and a change holds one
	// row and waits only on those, so no cycle.
	lockSubsSQL = `SELECT id, ordered, state, deleted_at IS NOT NULL FROM subscriptions
		WHERE id = ANY($1::text[]) ORDER BY id FOR SHARE`
	// Reserves n numbers per line at once; sorted input takes the row locks
	// in one order in every transaction, so two writers cannot deadlock.
	nextSeqsSQL = `INSERT INTO ordering_sequences (subscription_id, ordering_key, last_sequence)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(s, k, n) ORDER BY s, k
		ON CONFLICT (subscription_id, ordering_key)
		DO UPDATE SET last_sequence = ordering_sequences.last_sequence + EXCLUDED.last_sequence
		RETURNING subscription_id, ordering_key, last_sequence`
	insertDeliveriesSQL = `INSERT INTO deliveries (id, event_id, subscription_id, tenant_id, event_type, host, shard,
		state, attempt_count, round_start, round_started_at, next_attempt_at, last_status, last_error, ordering_key,
		sequence, created_at, updated_at)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int[],
			$8::text[], $9::int[], $10::int[], $11::timestamptz[], $12::timestamptz[], $13::int[], $14::text[], $15::text[],
			$16::bigint[], $17::timestamptz[], $18::timestamptz[])`
)

func (s *Store) EventInsertBatch(ctx context.Context, batch []store.EventInsert) ([]store.EventInsertResult, error) {
	if len(batch) == 0 {
		return []store.EventInsertResult{}, nil
	}
	var out []store.EventInsertResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = s.insertBatch(ctx, tx, batch)
		return err
	})
	if err != nil {
		return nil, mapErr(err)
	}
	return out, nil
}

type idemKey struct{ tenant, key string }

type seqLine struct{ sub, key string }

// subAtCommit is what a batch needs of a subscription.
type subAtCommit struct {
	ordered bool
	skip    string // why its deliveries given pending are written skipped; "" if not
}

// insertBatch writes the batch in four round trips whatever its size:
// its subscriptions' state and events (and what they collided with),
// sequences (ordered subscriptions only), then deliveries with their
// notifications.
func (s *Store) insertBatch(ctx context.Context, tx pgx.Tx, batch []store.EventInsert) ([]store.EventInsertResult, error) {
	// A key repeated within the batch: the later items answer whatever the
	// first one does, so only first occurrences go to the database.
	firstOf := map[idemKey]int{}
	dupOf := make([]int, len(batch))
	var cand []int // indexes of items sent to the database
	for i, in := range batch {
		dupOf[i] = -1
		if k := in.Event.IdempotencyKey; k != "" {
			ik := idemKey{in.Event.TenantID, k}
			if f, ok := firstOf[ik]; ok {
				dupOf[i] = f
				continue
			}
			firstOf[ik] = i
		}
		cand = append(cand, i)
	}
	// Rows in key order: two transactions inserting overlapping keys wait on
	// each other's index entries in the same order, never in a cycle.
	slices.SortStableFunc(cand, func(a, b int) int {
		ea, eb := &batch[a].Event, &batch[b].Event
		return cmp.Or(cmp.Compare(ea.TenantID, eb.TenantID), cmp.Compare(ea.IdempotencyKey, eb.IdempotencyKey))
	})

	n := len(cand)
	ids, tenants, types := make([]string, n), make([]string, n), make([]string, n)
	payloads := make([][]byte, n)
	keys, oks := make([]string, n), make([]string, n)
	created := make([]time.Time, n)
	var keyTenants, keyKeys []string
	subIDs := map[string]bool{} // the subscriptions the batch writes to
	for j, i := range cand {
		e := &batch[i].Event
		ids[j], tenants[j], types[j] = e.ID, e.TenantID, e.Type
		payloads[j] = e.Payload
		if payloads[j] == nil {
			payloads[j] = []byte{} // NOT NULL column
		}
		keys[j], oks[j], created[j] = e.IdempotencyKey, e.OrderingKey, e.CreatedAt
		if e.IdempotencyKey != "" {
			keyTenants = append(keyTenants, e.TenantID)
			keyKeys = append(keyKeys, e.IdempotencyKey)
		}
		for _, d := range batch[i].Deliveries {
			subIDs[d.SubscriptionID] = true
		}
	}

	// Round trip 1. The subscriptions are locked first (see lockSubsSQL).
	// The key lookup runs after the insert, in a new snapshot: a key that
	// lost to a concurrent transaction (the insert waited for it to commit)
	// is found here with the winner's ID.
	b := &pgx.Batch{}
	if len(subIDs) > 0 {
		b.Queue(lockSubsSQL, mapKeys(subIDs))
	}
	b.Queue(insertEventsSQL, ids, tenants, types, payloads, keys, oks, created)
	if len(keyKeys) > 0 {
		b.Queue(findKeysSQL, keyTenants, keyKeys)
	}
	br := tx.SendBatch(ctx, b)
	subs := make(map[string]subAtCommit, len(subIDs))
	if len(subIDs) > 0 {
		rows, _ := br.Query()
		var id string
		var state core.SubscriptionState
		var ordered, deleted bool
		if _, err := pgx.ForEachRow(rows, []any{&id, &ordered, &state, &deleted}, func() error {
			subs[id] = subAtCommit{ordered: ordered, skip: store.SkipReason(state, deleted)}
			return nil
		}); err != nil {
			br.Close()
			return nil, err
		}
	}
	inserted := map[string]bool{}
	rows, _ := br.Query()
	insIDs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		br.Close()
		return nil, err
	}
	for _, id := range insIDs {
		inserted[id] = true
	}
	owner := map[idemKey]string{}
	if len(keyKeys) > 0 {
		rows, _ := br.Query()
		var id string
		var k idemKey
		if _, err := pgx.ForEachRow(rows, []any{&id, &k.tenant, &k.key}, func() error {
			owner[k] = id
			return nil
		}); err != nil {
			br.Close()
			return nil, err
		}
	}
	if err := br.Close(); err != nil {
		return nil, err
	}

	out := make([]store.EventInsertResult, len(batch))
	var written [][]core.Delivery // per written item, in batch order
	var want = map[seqLine]int64{}
	for i, in := range batch {
		if dupOf[i] >= 0 {
			continue
		}
		ev := &in.Event
		if !inserted[ev.ID] {
			first, ok := owner[idemKey{ev.TenantID, ev.IdempotencyKey}]
			if ev.IdempotencyKey == "" || !ok {
				return nil, fmt.Errorf("postgres: event %s was neither written nor a duplicate", ev.ID)
			}
			out[i] = store.EventInsertResult{EventID: first, Duplicate: true}
			continue
		}
		ds := make([]core.Delivery, len(in.Deliveries))
		copy(ds, in.Deliveries)
		for k := range ds {
			d := &ds[k]
			d.Sequence, d.OrderingKey = 0, ev.OrderingKey
			// A missing subscription fails the delivery insert on its key.
			sa := subs[d.SubscriptionID]
			if d.State == core.DeliveryPending && sa.skip != "" {
				d.State, d.LastError = core.DeliverySkipped, sa.skip
			}
			if ev.OrderingKey != "" && sa.ordered {
				want[seqLine{d.SubscriptionID, ev.OrderingKey}]++
			}
		}
		out[i] = store.EventInsertResult{EventID: ev.ID, Deliveries: ds}
		written = append(written, ds)
	}
	for i := range batch {
		if f := dupOf[i]; f >= 0 {
			out[i] = store.EventInsertResult{EventID: out[f].EventID, Duplicate: true}
		}
	}

	// Round trip 2, only for ordered lines: reserve each line's numbers,
	// then hand them out in batch order.
	if len(want) > 0 {
		next, err := reserveSequences(ctx, tx, want)
		if err != nil {
			return nil, err
		}
		for _, ds := range written {
			for k := range ds {
				d := &ds[k]
				if l := (seqLine{d.SubscriptionID, d.OrderingKey}); d.OrderingKey != "" && subs[d.SubscriptionID].ordered {
					d.Sequence = next[l]
					next[l]++
				}
			}
		}
	}

	// Round trip 3: the deliveries, and one notification per subscription.
	b = &pgx.Batch{}
	if q, args, ok := deliveryInsert(written); ok {
		b.Queue(q, args...)
	}
	var due []store.Due
	seen := map[store.Due]bool{}
	for _, ds := range written {
		for _, d := range ds {
			if x := (store.Due{SubscriptionID: d.SubscriptionID, Shard: d.Shard}); d.State == core.DeliveryPending && !seen[x] {
				seen[x] = true
				due = append(due, x)
			}
		}
	}
	s.queueNotify(b, due)
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// reserveSequences takes want[line] numbers on each line and returns the
// first number reserved per line.
func reserveSequences(ctx context.Context, tx pgx.Tx, want map[seqLine]int64) (map[seqLine]int64, error) {
	lines := mapKeys(want)
	slices.SortFunc(lines, func(a, b seqLine) int { return cmp.Or(cmp.Compare(a.sub, b.sub), cmp.Compare(a.key, b.key)) })
	subs, keys, counts := make([]string, len(lines)), make([]string, len(lines)), make([]int64, len(lines))
	for i, l := range lines {
		subs[i], keys[i], counts[i] = l.sub, l.key, want[l]
	}
	rows, _ := tx.Query(ctx, nextSeqsSQL, subs, keys, counts)
	next := make(map[seqLine]int64, len(lines))
	var l seqLine
	var last int64
	if _, err := pgx.ForEachRow(rows, []any{&l.sub, &l.key, &last}, func() error {
		next[l] = last - want[l] + 1
		return nil
	}); err != nil {
		return nil, err
	}
	return next, nil
}

// deliveryInsert builds the one INSERT for every delivery of the batch.
func deliveryInsert(written [][]core.Delivery) (string, []any, bool) {
	n := 0
	for _, ds := range written {
		n += len(ds)
	}
	if n == 0 {
		return "", nil, false
	}
	var (
		ids, events, subs, tenants, types, hosts, states, lastErrs, oks = make([]string, 0, n), make([]string, 0, n),
			make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n),
			make([]string, 0, n), make([]string, 0, n)
		shards, attempts, roundStarts, lastStatus = make([]int32, 0, n), make([]int32, 0, n), make([]int32, 0, n), make([]int32, 0, n)
		seqs                                      = make([]int64, 0, n)
		roundAt, created, updated                 = make([]time.Time, 0, n), make([]time.Time, 0, n), make([]time.Time, 0, n)
		next                                      = make([]pgtype.Timestamptz, 0, n)
	)
	for _, ds := range written {
		for _, d := range ds {
			ids, events, subs, tenants = append(ids, d.ID), append(events, d.EventID), append(subs, d.SubscriptionID), append(tenants, d.TenantID)
			types, hosts, states = append(types, d.EventType), append(hosts, d.Host), append(states, string(d.State))
			shards, attempts, roundStarts = append(shards, int32(d.Shard)), append(attempts, int32(d.AttemptCount)), append(roundStarts, int32(d.RoundStart))
			roundAt, next = append(roundAt, d.CreatedAt), append(next, ts(d.NextAttemptAt))
			lastStatus, lastErrs, oks, seqs = append(lastStatus, int32(d.LastStatus)), append(lastErrs, d.LastError), append(oks, d.OrderingKey), append(seqs, d.Sequence)
			created, updated = append(created, d.CreatedAt), append(updated, d.UpdatedAt)
		}
	}
	return insertDeliveriesSQL, []any{ids, events, subs, tenants, types, hosts, shards, states, attempts, roundStarts,
		roundAt, next, lastStatus, lastErrs, oks, seqs, created, updated}, true
}

func mapKeys[K comparable, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func scanDelivery(row pgx.Row) (core.Delivery, error) {
	var d core.Delivery
	var next, c, u pgtype.Timestamptz
	if err := row.Scan(&d.ID, &d.EventID, &d.SubscriptionID, &d.TenantID, &d.EventType, &d.Host,
		&d.Shard, &d.State, &d.AttemptCount, &d.RoundStart, &next, &d.LastStatus, &d.LastError,
		&d.Sequence, &c, &u, &d.OrderingKey); err != nil {
		return d, err
	}
	d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = tm(next), tm(c), tm(u)
	return d, nil
}

func collectDeliveries(rows pgx.Rows) ([]core.Delivery, error) {
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

func scanEvent(row pgx.Row, ev *core.Event) error {
	var c pgtype.Timestamptz
	if err := row.Scan(&ev.ID, &ev.TenantID, &ev.Type, &ev.Payload, &ev.IdempotencyKey, &ev.OrderingKey, &c); err != nil {
		return err
	}
	ev.CreatedAt = tm(c)
	return nil
}

// readTx runs fn in a read-only snapshot, so reads of several tables agree.
func (s *Store) readTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

func (s *Store) EventGet(ctx context.Context, tenantID, id string) (core.Event, []core.Delivery, error) {
	var ev core.Event
	var ds []core.Delivery
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		err := scanEvent(tx.QueryRow(ctx, `SELECT `+eventColumns+` FROM events
			WHERE id = $1 AND ($2 = '' OR tenant_id = $2)`, id, tenantID), &ev)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+deliveryColumns+` FROM deliveries WHERE event_id = $1 ORDER BY id`, id)
		if err != nil {
			return err
		}
		ds, err = collectDeliveries(rows)
		return err
	})
	if err != nil {
		return core.Event{}, nil, mapErr(err)
	}
	return ev, ds, nil
}
