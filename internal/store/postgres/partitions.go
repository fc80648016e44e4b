package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"hookd/internal/core"
)

// Events, deliveries and attempts are partitioned by UTC day of their IDs
// (migration 0017): a day's partitions cover [IDFloor(day), IDFloor(next
// day)) of their key, named <table>_pYYYYMMDD. Every node makes the days
// ahead (at Open, then hourly); retention drops a day once it is past the
// window and holds no pending work (dropDay).

// partitioned are the tables split by day and their keys' ID prefixes.
var partitioned = [...]struct{ table, prefix string }{
	{"events", "evt"}, {"deliveries", "dlv"}, {"attempts", "dlv"},
}

// partitionsAhead is how far ahead of now days are made: an insert past the
// last day fails, so every node would have to be down this long before an
// ID outran them.
const partitionsAhead = 3 * 24 * time.Hour

// partitionLock serialises making and dropping days among nodes; Purge's
// batches take it shared, so they never run beside a drop.
const partitionLock = `hashtext('hookd.partitions.' || coalesce(current_schema(), ''))`

// dayName is the suffix of the partitions covering the day starting at t.
func dayName(t time.Time) string { return "_p" + t.UTC().Format("20060102") }

type partition struct {
	name   string
	lo, hi string    // its keys are in [lo, hi); lo "" for the legacy one's MINVALUE
	end    time.Time // the time of hi (zero for a bound that is no ID's)
}

// partitionsOf lists table's partitions, the legacy one among them. A
// partition another node detaches meanwhile may still be listed by the
// query's snapshot with its bound already gone from the catalog: it is
// left out.
func partitionsOf(ctx context.Context, tx pgx.Tx, table string) ([]partition, error) {
	rows, _ := tx.Query(ctx, `SELECT c.relname, coalesce(pg_get_expr(c.relpartbound, c.oid), '')
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass ORDER BY c.relname`, table)
	var out []partition
	var name, bound string
	_, err := pgx.ForEachRow(rows, []any{&name, &bound}, func() error {
		if bound == "" {
			return nil
		}
		// FOR VALUES FROM (...) TO ('<hi>'): IDs hold no quote.
		i := strings.LastIndex(bound, "TO ('")
		if i < 0 || !strings.HasSuffix(bound, "')") {
			return fmt.Errorf("postgres: partition %s: unexpected bound %q", name, bound)
		}
		p := partition{name: name, hi: bound[i+len("TO ('") : len(bound)-2]}
		if lo, ok := strings.CutPrefix(bound[:i], "FOR VALUES FROM ('"); ok {
			p.lo = strings.TrimSuffix(lo, "') ")
		}
		// The time of its first 10 characters (a floor's, or the legacy
		// bound's, the last ID and a "0").
		if prefix, ulid, _ := strings.Cut(p.hi, "_"); len(ulid) >= 10 {
			p.end, _ = core.IDTime(prefix + "_" + ulid[:10] + strings.Repeat("0", 16))
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

// ensurePartitions makes the days from the last partition of each table to
// partitionsAhead past now. A day is made as a table of its own, given the
// parent's indexes under names of its own, and attached: attaching takes a
// lock that lets writes go on, where CREATE TABLE ... PARTITION OF would
// stop them.
func (s *Store) ensurePartitions(ctx context.Context, now time.Time) error {
	var covered time.Time // the least day end of the three tables, zero: unknown
	err := retryBusy(ctx, ddlTries, func() error {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			return makeDays(ctx, tx, now, &covered)
		})
		if busy(err) && covered.After(now.Add(24*time.Hour)) {
			// The days there are will do until the next pass (hourly,
			// and each Purge): a node starting beside writers need not
			// wait out the tries.
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: making partitions: %w", err)
	}
	return nil
}

func makeDays(ctx context.Context, tx pgx.Tx, now time.Time, covered *time.Time) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+partitionLock+`)`); err != nil {
		return err
	}
	// Attaching a day waits behind every writer, and every writer after
	// behind it (deliveries' foreign key locks subscriptions too).
	if _, err := tx.Exec(ctx, ddlLockTimeout); err != nil {
		return err
	}
	// Each table's last day, all read before any is made: covered holds
	// for all three, and a bound that is no ID's (a zero end) covers none.
	var lasts [len(partitioned)]partition
	*covered = time.Time{}
	for i, p := range partitioned {
		parts, err := partitionsOf(ctx, tx, p.table)
		if err != nil {
			return err
		}
		for _, q := range parts {
			if q.hi > lasts[i].hi {
				lasts[i] = q
			}
		}
		if lasts[i].hi == "" {
			return fmt.Errorf("postgres: %s has no partition", p.table)
		}
	}
	*covered = lasts[0].end
	for _, last := range lasts {
		if last.end.IsZero() {
			*covered = time.Time{}
			break
		}
		if last.end.Before(*covered) {
			*covered = last.end
		}
	}
	for i, p := range partitioned {
		last := lasts[i]
		for hi, t := last.hi, last.end; t.Before(now.Add(partitionsAhead)); {
			// A partition starts in the day its predecessor ends; one
			// ending over a month ago (a node down that long, or a
			// legacy table idle) is followed by one spanning the gap.
			start := t
			if start.Before(now.Add(-30 * 24 * time.Hour)) {
				start = now.Add(-24 * time.Hour)
			}
			start = start.UTC().Truncate(24 * time.Hour)
			end := start.Add(24 * time.Hour)
			next := core.IDFloor(p.prefix, end)
			if err := makeDay(ctx, tx, p.table, p.table+dayName(start), hi, next); err != nil {
				return err
			}
			hi, t = next, end
		}
	}
	return nil
}

// ddlLockTimeout bounds each lock wait of a transaction that makes,
// detaches or drops days to a fifth of deadlock_timeout (10 to 100 ms).
// Such a lock waits for every transaction using the table, and every
// transaction after it waits in turn; holding one lock while it waited
// for the next, a drop took part in deadlocks that PostgreSQL broke by
// failing a refill or a result write (beside a purge under load: 5 in 40
// s), and stalled writers for up to its old 5 s timeout. Now none of them
// waits on it long enough to look for a deadlock: a busy pass gives up
// and tries again (retryBusy).
const ddlLockTimeout = `SELECT set_config('lock_timeout',
	least(100, greatest(10, (SELECT setting::int FROM pg_settings WHERE name = 'deadlock_timeout') / 5))::text, true)`

// ddlTries is how often making days and removing detached ones are tried,
// about 10 s in all. A day's lock is tried until dropBudget ends, since a
// day not dropped is deleted row by row by the pass's batches. Each try
// that fails holds writers up to ddlLockTimeout per table.
const ddlTries = 8

// retryBusy runs fn again while it is busy, waiting longer each time (up to
// 3.2 s, with jitter so that nodes do not try in step), up to tries times
// or until ctx ends; it answers fn's last error.
func retryBusy(ctx context.Context, tries int, fn func() error) error {
	for try := 0; ; try++ {
		err := fn()
		if !busy(err) || try == tries-1 {
			return err
		}
		wait := time.Duration(50<<min(try, 6)) * time.Millisecond
		t := time.NewTimer(wait/2 + time.Duration(rand.Int64N(int64(wait))))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

func makeDay(ctx context.Context, tx pgx.Tx, table, name, lo, hi string) error {
	// A day dropped (detached, its files not yet removed by dropDetached)
	// and wanted again, as after a cutoff past the days ahead: the
	// leftover goes first. Under partitionLock nothing else makes or
	// removes it meanwhile; an attached one is never dropped here.
	var leftover bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_class
		WHERE oid = to_regclass($1) AND relkind = 'r' AND NOT relispartition)`, name).Scan(&leftover); err != nil {
		return err
	}
	if leftover {
		if _, err := tx.Exec(ctx, `DROP TABLE `+name); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`, name, table)); err != nil {
		return err
	}
	// The parent's indexes, named <index>_pYYYYMMDD so plans name what
	// they use; attaching adopts them.
	day := strings.TrimPrefix(name, table)
	rows, _ := tx.Query(ctx, `SELECT i.relname, x.indisprimary, pg_get_indexdef(x.indexrelid)
		FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
		WHERE x.indrelid = $1::regclass ORDER BY 1`, table)
	var idx, def string
	var primary bool
	var defs []string
	if _, err := pgx.ForEachRow(rows, []any{&idx, &primary, &def}, func() error {
		// CREATE [UNIQUE] INDEX <idx> ON [ONLY] <schema>.<table> USING btree (<columns>) [WHERE ...]
		_, rest, ok := strings.Cut(def, " ON ")
		_, using, ok2 := strings.Cut(rest, " USING ")
		cols, ok3 := strings.CutPrefix(using, "btree ")
		if !ok || !ok2 || !ok3 {
			return fmt.Errorf("postgres: index %s: unexpected definition %q", idx, def)
		}
		if primary {
			defs = append(defs, fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT %s PRIMARY KEY %s`, name, idx+day, cols))
		} else {
			defs = append(defs, fmt.Sprintf(`CREATE INDEX %s ON %s USING %s`, idx+day, name, using))
		}
		return nil
	}); err != nil {
		return err
	}
	if table == "deliveries" {
		// An event's deliveries, unique within the day (see 0017).
		defs = append(defs, fmt.Sprintf(`CREATE UNIQUE INDEX deliveries_event%s ON %s (event_id, subscription_id)`, day, name))
	}
	for _, d := range defs {
		if _, err := tx.Exec(ctx, d); err != nil {
			return err
		}
	}
	_, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`, table, name, lo, hi))
	return err
}

// keepPartitions makes the days ahead every hour until ctx ends. A failure
// is tried again the next hour; partitionsAhead leaves days for that.
func (s *Store) keepPartitions(ctx context.Context) {
	defer close(s.kept)
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.ensurePartitions(ctx, time.Now())
		}
	}
}

// dropDays drops each day whose partitions end at or before cutoff and hold
// no pending work, after adding their deliveries to the kept counts. A day
// that cannot go whole is left to Purge's batches. It answers how many
// events went.
func (s *Store) dropDays(ctx context.Context, cutoff time.Time) (int, error) {
	if err := s.dropDetached(ctx); err != nil { // what a crash left
		return 0, err
	}
	var days []dayTables
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		byName := map[string]partition{}
		for _, p := range partitioned {
			parts, err := partitionsOf(ctx, tx, p.table)
			if err != nil {
				return err
			}
			for _, q := range parts {
				byName[q.name] = q
			}
		}
		detached, err := detachedDays(ctx, tx)
		if err != nil {
			return err
		}
		for name, ev := range byName {
			day, ok := strings.CutPrefix(name, "events_p")
			// A drop cut short is finished whatever the cutoff (a longer
			// window since, another node's): its deliveries are gone.
			if !ok || ev.lo == "" || ev.end.IsZero() || ev.end.After(cutoff) && !detached["deliveries_p"+day] {
				continue
			}
			// The first day after a legacy partition may lack a table
			// whose legacy rows ran past midnight: it stays, emptied by
			// the batches. One detached already was a drop cut short.
			d := dayTables{ev: ev}
			d.dl, d.dlAttached = byName["deliveries_p"+day]
			d.at, d.atAttached = byName["attempts_p"+day]
			dlGone, atGone := detached["deliveries_p"+day], detached["attempts_p"+day]
			switch {
			case d.dlAttached && d.atAttached, dlGone && (d.atAttached || atGone):
				days = append(days, d)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	// The drops' tries end well inside the caller's time for a pass
	// (retention gives Purge a minute): what is left goes by the batches.
	dctx, cancel := context.WithTimeout(ctx, dropBudget)
	defer cancel()
	removed := 0
	for _, d := range days {
		if dctx.Err() != nil {
			break
		}
		n, err := s.dropDay(dctx, d, cutoff)
		if err != nil {
			if ctx.Err() == nil && dctx.Err() != nil {
				break // out of budget, not failed
			}
			return removed, err
		}
		removed += n
	}
	return removed, nil
}

// dropBudget bounds a pass's drops, their tries for the tables' lock
// included.
const dropBudget = 20 * time.Second

// dropDetached drops the day tables no longer attached: those dropDay
// detached, and any a crash left detached before it could drop them. A
// table's files go outside the parents' lock, but under partitionLock: a
// day of the same name made again meanwhile (makeDay) is never taken for
// a leftover. Busy (the lock not had in time), it is left to the next pass.
func (s *Store) dropDetached(ctx context.Context) error {
	err := retryBusy(ctx, ddlTries, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+partitionLock+`)`); err != nil {
				return err
			}
			// A day's deliveries or attempts detached while its events are
			// attached are a drop cut short (events go last): they say
			// where it stopped (dropDays).
			rows, _ := tx.Query(ctx, `SELECT c.relname FROM pg_class c
				WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND NOT c.relispartition
					AND c.relname ~ '^(events|deliveries|attempts)_p[0-9]{8}$'
					AND NOT (c.relname !~ '^events' AND EXISTS (SELECT 1 FROM pg_class a
						WHERE a.relnamespace = c.relnamespace AND a.relispartition AND a.relname = 'events_p' || right(c.relname, 8)))
				ORDER BY 1`)
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil || len(names) == 0 {
				return err
			}
			// A deliveries day's foreign key goes with it, which locks
			// subscriptions whole.
			if _, err := tx.Exec(ctx, ddlLockTimeout); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `DROP TABLE `+strings.Join(names, ", "))
			return err
		})
	})
	if busy(err) {
		return nil
	}
	return err
}

// detachedDays names the day tables detached and not yet removed.
func detachedDays(ctx context.Context, tx pgx.Tx) (map[string]bool, error) {
	rows, _ := tx.Query(ctx, `SELECT relname FROM pg_class
		WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r' AND NOT relispartition
			AND relname ~ '^(events|deliveries|attempts)_p[0-9]{8}$'`)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out, err
}

// busy is a lock not had within lock_timeout, or a deadlock (the other
// side's transaction is retried): the next pass tries again.
func busy(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "40P01")
}

// errKept ends a drop's transaction, rolling it back, when its day stays.
var errKept = errors.New("day kept")

// dayTables is one day's partitions: events, deliveries, attempts; a
// deliveries or attempts partition already detached (a drop cut short)
// has only its name.
type dayTables struct {
	ev, dl, at             partition
	dlAttached, atAttached bool
}

// dropDay drops one day's partitions, unless they hold pending work or an
// event created at or after cutoff, one table at a time: deliveries (the
// checks and the counts), then attempts, then events. Each step locks one
// table: holding one while it waited for the next, a drop beside
// sustained writes seldom had all three at once (a writer holding one
// waited behind it for another). A step cut short leaves the rest to the
// next pass: its detached tables stay until none of the day is attached
// (dropDetached), and mark where it stopped. It answers how many events
// went.
func (s *Store) dropDay(ctx context.Context, day dayTables, cutoff time.Time) (int, error) {
	var err error
	if day.dlAttached {
		err = s.dropDayDeliveries(ctx, day, cutoff)
	}
	if err == nil && day.atAttached {
		err = s.detachDay(ctx, "attempts", day.at.name, nil, nil)
	}
	removed := 0
	if err == nil {
		// The day's idempotency keys go first, committed: held while the
		// drop waits for events' lock, a writer reusing an old key would
		// wait on them holding events. Each is its own event's (a key
		// given again since is another event's, and stays).
		err = s.inDropTx(ctx, func(tx pgx.Tx) error {
			if err := stillAttached(ctx, tx, day.ev.name); err != nil {
				return err // another node's pass dropped it meanwhile
			}
			_, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM event_keys k USING %s e
				WHERE e.idempotency_key <> '' AND k.tenant_id = e.tenant_id AND k.idempotency_key = e.idempotency_key
				AND k.event_id = e.id`, day.ev.name))
			return err
		})
	}
	if err == nil {
		// Counted before the lock, which stops every ingest: nothing is
		// written to a past day, and the batches are kept out.
		err = s.detachDay(ctx, "events", day.ev.name, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT count(*) FROM `+day.ev.name).Scan(&removed)
		}, nil)
	}
	if err == nil {
		// The day is gone from the tables; a failure to remove its files
		// now is retried by the next pass's dropDays, which reports it.
		s.dropDetached(ctx)
	}
	switch {
	case errors.Is(err, errKept), busy(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("postgres: dropping %s: %w", day.ev.name, err)
	}
	return removed, nil
}

// lockTable takes table's ACCESS EXCLUSIVE lock (which a detach needs)
// in tx, each wait bounded by ddlLockTimeout, trying again behind a
// savepoint (so what tx did before stands) until ctx ends. A deliveries
// day's detach also locks subscriptions (SHARE ROW EXCLUSIVE, for its
// foreign key), taken here with it so that its wait is retried too.
func lockTable(ctx context.Context, tx pgx.Tx, table string) error {
	if _, err := tx.Exec(ctx, ddlLockTimeout); err != nil {
		return err
	}
	return retryBusy(ctx, math.MaxInt, func() error {
		if _, err := tx.Exec(ctx, `SAVEPOINT table_lock`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `LOCK TABLE `+table+` IN ACCESS EXCLUSIVE MODE`)
		if err == nil && table == "deliveries" {
			_, err = tx.Exec(ctx, `LOCK TABLE subscriptions IN SHARE ROW EXCLUSIVE MODE`)
		}
		if busy(err) {
			if _, rerr := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT table_lock`); rerr != nil {
				return rerr
			}
		}
		return err
	})
}

// inDropTx runs fn in a transaction holding partitionLock, exclusive
// against every node's Purge batch (which takes it shared): no batch
// removes a row of the day between a drop's counts and its detach, so
// nothing is counted twice.
func (s *Store) inDropTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+partitionLock+`)`); err != nil {
			return err
		}
		return fn(tx)
	})
}

// detachDay detaches partition from table, still attached as listed
// (another node may have detached it since), under the table's lock:
// before runs ahead of the lock, under runs holding it (either nil).
func (s *Store) detachDay(ctx context.Context, table, partition string, before, under func(tx pgx.Tx) error) error {
	return s.inDropTx(ctx, func(tx pgx.Tx) error {
		if err := stillAttached(ctx, tx, partition); err != nil {
			return err
		}
		if before != nil {
			if err := before(tx); err != nil {
				return err
			}
		}
		if err := lockTable(ctx, tx, table); err != nil {
			return err
		}
		if under != nil {
			if err := under(tx); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s`, table, partition))
		return err
	})
}

func stillAttached(ctx context.Context, tx pgx.Tx, partition string) error {
	var attached bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass($1))`, partition).Scan(&attached); err != nil {
		return err
	}
	if !attached {
		return errKept
	}
	return nil
}

// dropDayDeliveries is a day's first step: unless its deliveries hold
// pending work or its events one created at or after cutoff, it adds them
// to the counts and detaches them. The scans (the counts) run before the
// lock, which stops every read and write of deliveries, so it is held only
// for the checks by index and the detach. A replay cannot make a delivery
// pending behind the check, which runs again under the lock; one that
// both made a delivery of the day pending and finished it between the
// counts and the lock (moments, or up to dropBudget while writers keep
// the lock from it) would leave the counts with its state before (a
// replay of a delivery past the window, finished within those seconds).
// Deliveries of its events written in a later day (a batch spanning
// midnight) go with it.
func (s *Store) dropDayDeliveries(ctx context.Context, day dayTables, cutoff time.Time) error {
	ev, dl := day.ev.name, day.dl.name
	elo, ehi, dhi := day.ev.lo, day.ev.hi, day.dl.hi
	return s.inDropTx(ctx, func(tx pgx.Tx) error {
		if err := stillAttached(ctx, tx, dl); err != nil {
			return err
		}
		keeps := func() error {
			var kept bool
			if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE state = 'pending')
				OR EXISTS (SELECT 1 FROM %s WHERE created_at >= $1)`, dl, ev), cutoff).Scan(&kept); err != nil {
				return err
			}
			if kept {
				return errKept
			}
			return nil
		}
		if err := keeps(); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, countsSQL(dl)); err != nil {
			return err
		}
		if err := lockTable(ctx, tx, "deliveries"); err != nil {
			return err
		}
		if err := keeps(); err != nil {
			return err
		}
		// Its events' deliveries in later days: one a replay made pending
		// keeps the day.
		later := `FROM deliveries WHERE id >= $1 AND event_id >= $2 AND event_id < $3`
		rows, _ := tx.Query(ctx, `SELECT state `+later, dhi, elo, ehi)
		states, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, st := range states {
			if st == "pending" {
				return errKept
			}
		}
		b := &pgx.Batch{}
		if len(states) > 0 {
			of := `(SELECT * ` + later + `)`
			b.Queue(countsSQL(of), dhi, elo, ehi)
			b.Queue(`DELETE FROM attempts WHERE delivery_id IN (SELECT id `+later+`)`, dhi, elo, ehi)
			b.Queue(`DELETE `+later, dhi, elo, ehi)
		}
		// Detached under the lock (a catalog change); its file is removed
		// with the rest of the day's, by dropDetached.
		b.Queue(fmt.Sprintf(`ALTER TABLE deliveries DETACH PARTITION %s`, dl))
		return tx.SendBatch(ctx, b).Close()
	})
}

// countsSQL adds the deliveries of from to the hourly and daily counts per
// subscription, in one scan: the days are summed from the hours (a UTC
// hour lies in one UTC day). Grouped by hashing, then the few groups
// sorted, so the rows of the counts are locked in one order by every
// writer.
func countsSQL(from string) string {
	return `WITH h AS MATERIALIZED (
			SELECT subscription_id, date_bin('1 hour', created_at, timestamptz '1970-01-01 00:00:00Z') AS hour,
				count(*) FILTER (WHERE state = 'delivered') AS delivered, count(*) FILTER (WHERE state = 'failed') AS failed,
				count(*) FILTER (WHERE state = 'skipped') AS skipped, sum(attempt_count) AS attempts
			FROM ` + from + ` AS d GROUP BY 1, 2),
		days AS (
			INSERT INTO daily_counts (subscription_id, day, delivered, failed, skipped, attempts)
			SELECT subscription_id, (hour AT TIME ZONE 'UTC')::date, sum(delivered), sum(failed), sum(skipped), sum(attempts)
			FROM h GROUP BY 1, 2 ORDER BY 1, 2
			ON CONFLICT (subscription_id, day) DO UPDATE SET
				delivered = daily_counts.delivered + EXCLUDED.delivered,
				failed = daily_counts.failed + EXCLUDED.failed,
				skipped = daily_counts.skipped + EXCLUDED.skipped,
				attempts = daily_counts.attempts + EXCLUDED.attempts)
		INSERT INTO hourly_counts (subscription_id, hour, delivered, failed, skipped, attempts)
		SELECT * FROM h ORDER BY 1, 2
		ON CONFLICT (subscription_id, hour) DO UPDATE SET
			delivered = hourly_counts.delivered + EXCLUDED.delivered,
			failed = hourly_counts.failed + EXCLUDED.failed,
			skipped = hourly_counts.skipped + EXCLUDED.skipped,
			attempts = hourly_counts.attempts + EXCLUDED.attempts`
}
