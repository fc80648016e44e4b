package postgres

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"hookd/internal/core"
	"hookd/internal/store"
)

// leaseLockSQL serialises lease changes of all nodes (per schema): each call
// then sees every other node's last committed holdings, so shares add up.
// Calls come every few seconds per node, so the queue is short.
const leaseLockSQL = `SELECT pg_advisory_xact_lock(hashtext('hookd.leases.' || coalesce(current_schema(), '')))`

// forgetNodesAfter is how long a node that stopped heartbeating stays in
// the nodes table (it no longer counts as alive after its TTL anyway).
const forgetNodesAfter = time.Hour

// ShardLeases balances the shards over the live nodes. Every share is at
// most NumShards over the live nodes rounded up, as the interface says; the
// remainder goes to the nodes already holding the most (then lowest ID), so
// that the shares add up to NumShards and differ by at most one, and a
// stable cluster moves nothing. Only free or lapsed shards are taken, under
// row locks, so no shard is ever held by two nodes.
//
// Times come from the database's clock, read once the lock is held, not
// from now (the node's clock): nodes whose clocks disagree then still agree
// on which leases are live. The node's own guard (dispatch) measures from
// before the call, so it stops sending before the lease lapses either way.
func (s *Store) ShardLeases(ctx context.Context, node string, ttl time.Duration, now time.Time) (held, leaving []int, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(leaseLockSQL)
		if !s.callerClock {
			b.Queue(`SELECT clock_timestamp()`).QueryRow(func(r pgx.Row) error { return r.Scan(&now) })
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		until := now.Add(ttl)
		// tell: the shares changed (node was not alive before this call,
		// or it gives shards back), so the others should lease again now
		// rather than at their next renewal.
		var tell bool
		b = &pgx.Batch{}
		b.Queue(`WITH old AS (SELECT alive_until FROM nodes WHERE id = $1)
			INSERT INTO nodes (id, alive_until) VALUES ($1, $2)
			ON CONFLICT (id) DO UPDATE SET alive_until = EXCLUDED.alive_until
			RETURNING coalesce((SELECT alive_until <= $3 FROM old), true)`, node, until, now).
			QueryRow(func(r pgx.Row) error { return r.Scan(&tell) })
		b.Queue(`DELETE FROM nodes WHERE alive_until < $1`, now.Add(-forgetNodesAfter))
		b.Queue(`UPDATE shard_leases SET expires_at = $2 WHERE node = $1`, node, until)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		type live struct {
			id   string
			held int
		}
		// Shards a node is leaving count as given back already.
		rows, _ := tx.Query(ctx, `SELECT n.id, count(l.shard) FROM nodes n
			LEFT JOIN shard_leases l ON l.node = n.id AND l.expires_at > $1 AND NOT l.leaving
			WHERE n.alive_until > $1 GROUP BY n.id`, now)
		nodes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (live, error) {
			var l live
			return l, r.Scan(&l.id, &l.held)
		})
		if err != nil {
			return err
		}
		slices.SortFunc(nodes, func(a, b live) int { return cmp.Or(cmp.Compare(b.held, a.held), cmp.Compare(a.id, b.id)) })
		share, mine := 0, 0
		for rank, l := range nodes {
			if l.id == node {
				share = core.NumShards / len(nodes)
				if rank < core.NumShards%len(nodes) {
					share++
				}
				mine = l.held
			}
		}
		switch {
		case mine > share:
			// Give back the highest shards above the share: they leave
			// this node's answer now, and go to a joining node once
			// ShardHandOver says nothing of them is in flight.
			_, err = tx.Exec(ctx, `UPDATE shard_leases SET leaving = true
				WHERE shard IN (SELECT shard FROM shard_leases WHERE node = $1 AND NOT leaving
					ORDER BY shard DESC LIMIT $2)`,
				node, mine-share)
			tell = true
		case mine < share:
			// Shards this node is still leaving come back first, then
			// free or lapsed ones. SKIP LOCKED: a row another transaction
			// is changing is not free for us, whatever it does with it.
			var back int64
			tag, err2 := tx.Exec(ctx, `UPDATE shard_leases SET leaving = false
				WHERE shard IN (SELECT shard FROM shard_leases WHERE node = $1 AND leaving
					ORDER BY shard LIMIT $2)`, node, share-mine)
			if err = err2; err == nil {
				back = tag.RowsAffected()
				_, err = tx.Exec(ctx, `UPDATE shard_leases SET node = $1, expires_at = $2, leaving = false
					WHERE shard IN (SELECT shard FROM shard_leases
						WHERE shard < $3 AND (node IS NULL OR expires_at <= $4)
						ORDER BY shard LIMIT $5 FOR UPDATE SKIP LOCKED)`,
					node, until, core.NumShards, now, share-mine-int(back))
			}
		}
		if err == nil && tell {
			err = s.notify(ctx, tx, store.Due{Kind: store.DueLeases})
		}
		if err != nil {
			return err
		}
		held, leaving = nil, nil
		var shard int
		var left bool
		rows, _ = tx.Query(ctx, `SELECT shard, leaving FROM shard_leases WHERE node = $1 ORDER BY shard`, node)
		_, err = pgx.ForEachRow(rows, []any{&shard, &left}, func() error {
			if left {
				leaving = append(leaving, shard)
			} else {
				held = append(held, shard)
			}
			return nil
		})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return held, leaving, nil
}

// ShardHandOver frees shards node is leaving, and tells the others.
func (s *Store) ShardHandOver(ctx context.Context, node string, shards []int) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(leaseLockSQL)
		b.Queue(`UPDATE shard_leases SET node = NULL, expires_at = NULL, leaving = false
			WHERE node = $1 AND leaving AND shard = ANY($2)`, node, shards)
		s.queueNotify(b, []store.Due{{Kind: store.DueLeases}})
		return tx.SendBatch(ctx, b).Close()
	})
}

// ShardRelease frees node's shards and forgets the node, and tells the
// others, whose next calls (at once, on the notification) share its shards out.
func (s *Store) ShardRelease(ctx context.Context, node string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(leaseLockSQL)
		b.Queue(`UPDATE shard_leases SET node = NULL, expires_at = NULL, leaving = false WHERE node = $1`, node)
		b.Queue(`DELETE FROM nodes WHERE id = $1`, node)
		s.queueNotify(b, []store.Due{{Kind: store.DueLeases}})
		return tx.SendBatch(ctx, b).Close()
	})
}
