package postgres

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/internal/testenv"
)

// idAt is an ID as NewID would make it at t.
func idAt(prefix string, t time.Time) string {
	b := make([]byte, 16)
	rand.Read(b)
	for i := range b {
		b[i] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"[b[i]%32]
	}
	return core.IDFloor(prefix, t) + string(b)
}

// eventAt is an event made at t (its ID, deliveries' and times), with the
// deliveries' IDs made dt after it.
func eventAt(t time.Time, dt time.Duration, key string, subs ...core.Subscription) store.EventInsert {
	in := event(subs...)
	in.Event.ID, in.Event.CreatedAt, in.Event.IdempotencyKey = idAt("evt", t), t, key
	for i := range in.Deliveries {
		d := &in.Deliveries[i]
		d.ID, d.EventID = idAt("dlv", t.Add(dt)), in.Event.ID
		d.CreatedAt, d.UpdatedAt, d.NextAttemptAt = t, t, t
	}
	return in
}

func exists(t *testing.T, s *Store, table string) bool {
	t.Helper()
	var ok bool
	if err := s.pool.QueryRow(t.Context(), `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// orphans counts deliveries without their event and attempts without their
// delivery: with no foreign keys between the partitioned tables, the code
// is what keeps them whole.
func orphans(t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) int {
	t.Helper()
	var n int
	// Not t.Context(): cleanups call it, after that context ends.
	if err := db.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM deliveries d WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.id = d.event_id)) +
		(SELECT count(*) FROM attempts a WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.id = a.delivery_id))`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// daysAhead is a store with days made through ten days ahead, now, and the
// start of the day five days ahead: the retention tests make their past
// there, with cutoffs past it.
func daysAhead(t *testing.T) (*Store, time.Time, time.Time) {
	t.Helper()
	s := openURL(t, testenv.PostgresSchema(t))
	now := time.Now().UTC()
	if err := s.ensurePartitions(t.Context(), now.Add(10*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	return s, now, now.Truncate(24 * time.Hour).Add(5 * 24 * time.Hour)
}

// Open makes a day's partitions for every table through three days ahead,
// and making them again changes nothing; IDs of any millisecond of those
// days are written.
func TestDaysAreMadeAhead(t *testing.T) {
	s := openURL(t, testenv.PostgresSchema(t))
	now := time.Now().UTC()
	today := now.Truncate(24 * time.Hour)
	for d := range 4 {
		for _, p := range partitioned {
			if name := p.table + dayName(today.Add(time.Duration(d)*24*time.Hour)); !exists(t, s, name) {
				t.Errorf("no %s after Open", name)
			}
		}
	}
	if err := s.ensurePartitions(t.Context(), now); err != nil {
		t.Fatalf("making the days again: %v", err)
	}
	sub := activeSub(t, s, "h.example:443")
	last := today.Add(4*24*time.Hour - time.Millisecond)
	for _, at := range []time.Time{now, today.Add(24 * time.Hour), last} {
		res := insert(t, s, eventAt(at, 0, "", sub))
		if _, _, err := s.EventGet(t.Context(), "", res[0].EventID); err != nil {
			t.Errorf("event made at %v: %v", at, err)
		}
	}
	if _, err := s.EventInsertBatch(t.Context(), []store.EventInsert{eventAt(last.Add(24*time.Hour), 0, "", sub)}); err == nil {
		t.Errorf("an event five days ahead was written: the test's days are not what it thinks")
	}
}

// Retention drops a day past the window whole, with what its deliveries
// added up to kept in the counts, and the deliveries of its events written
// just past midnight; a day holding a pending delivery is kept, and its
// finished events go by the batches; a key of a dropped event is free
// again. Nothing is left without its event or delivery.
func TestRetentionDropsWholeDays(t *testing.T) {
	s, now, day := daysAhead(t)
	ctx := t.Context()
	next := day.Add(24 * time.Hour)
	a, b := activeSub(t, s, "a.example:443"), activeSub(t, s, "b.example:443")

	// Day one: two finished events, one with a key, one whose deliveries
	// were made a few milliseconds past midnight (the next day's).
	done := insert(t, s, eventAt(day.Add(time.Hour), 0, "k1", a, b), eventAt(next.Add(-time.Millisecond), 3*time.Millisecond, "", a))
	// Day two: one finished event, one pending.
	kept := insert(t, s, eventAt(next.Add(time.Hour), 0, "", a), eventAt(next.Add(2*time.Hour), 0, "", b))
	var rs []store.AttemptResult
	for _, r := range append(done, kept[0]) {
		for _, d := range r.Deliveries {
			rs = append(rs, store.AttemptResult{Attempt: core.Attempt{DeliveryID: d.ID, N: 1, StartedAt: d.CreatedAt, StatusCode: 200},
				State: core.DeliveryDelivered, Now: d.CreatedAt})
		}
	}
	if err := s.DeliveryRecordResults(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if got := done[1].Deliveries[0].ID; got < core.IDFloor("dlv", next) {
		t.Fatalf("the straddling delivery %s is not in the next day: the test proves nothing", got)
	}

	res, err := s.Purge(ctx, next.Add(24*time.Hour+time.Minute), store.PurgeCursor{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if res.Removed != 3 {
		t.Errorf("Purge removed %d events, want 3 (day one's two by the drop, day two's finished one)", res.Removed)
	}
	for _, p := range partitioned {
		if exists(t, s, p.table+dayName(day)) {
			t.Errorf("%s is still there", p.table+dayName(day))
		}
		if !exists(t, s, p.table+dayName(next)) {
			t.Errorf("%s, which holds pending work, was dropped", p.table+dayName(next))
		}
	}
	for _, r := range append(done, kept[0]) {
		if _, _, err := s.EventGet(ctx, "", r.EventID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("event %s: %v, want it removed", r.EventID, err)
		}
	}
	if _, ds, err := s.EventGet(ctx, "", kept[1].EventID); err != nil || len(ds) != 1 || ds[0].State != core.DeliveryPending {
		t.Errorf("the pending event: %v, %v; want it kept with its pending delivery", ds, err)
	}
	if n := orphans(t, s.pool); n != 0 {
		t.Errorf("%d deliveries or attempts are left without their event or delivery", n)
	}
	// Day one's counts: a delivered 2 (one made on day two), b 1.
	counts := map[string]int64{}
	for _, sub := range []core.Subscription{a, b} {
		cs, err := s.DailyCounts(ctx, sub.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			counts[fmt.Sprintf("%s %s", sub.Host, c.Day.Format("2006-01-02"))] += c.Delivered
		}
	}
	want := map[string]int64{"a.example:443 " + day.Format("2006-01-02"): 2, "b.example:443 " + day.Format("2006-01-02"): 1,
		"a.example:443 " + next.Format("2006-01-02"): 1}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("daily counts %v, want %v", counts, want)
	}
	again := insert(t, s, eventAt(next.Add(3*time.Hour), 0, "k1", a)) // a day kept
	if again[0].Duplicate {
		t.Errorf("the key of a dropped event still answers %s", again[0].EventID)
	}

	// A day whose drop stopped after its deliveries (a crash between its
	// steps) goes at the next pass, even one with a longer window: its
	// attempts and events too, nothing of it counted twice.
	cut := next.Add(3 * 24 * time.Hour)
	cutRes := insert(t, s, eventAt(cut.Add(time.Hour), 0, "", a))
	cutD := cutRes[0].Deliveries[0]
	if err := s.DeliveryRecordResults(ctx, []store.AttemptResult{{Attempt: core.Attempt{DeliveryID: cutD.ID, N: 1,
		StartedAt: cutD.CreatedAt, StatusCode: 200}, State: core.DeliveryDelivered, Now: cutD.CreatedAt}}); err != nil {
		t.Fatal(err)
	}
	if err := s.dropDayDeliveries(ctx, dayTables{ev: partition{name: "events" + dayName(cut), lo: core.IDFloor("evt", cut),
		hi: core.IDFloor("evt", cut.Add(24*time.Hour))}, dl: partition{name: "deliveries" + dayName(cut), hi: core.IDFloor("dlv", cut.Add(24*time.Hour))}},
		cut.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	countsBefore := dailyDelivered(t, s, a.ID)
	if _, err := s.Purge(ctx, cut, store.PurgeCursor{}, 100); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"events", "deliveries", "attempts"} {
		if exists(t, s, table+dayName(cut)) {
			t.Errorf("%s of a day whose drop stopped after its deliveries is still there after a pass", table+dayName(cut))
		}
	}
	if got := dailyDelivered(t, s, a.ID); got != countsBefore {
		t.Errorf("the day's deliveries were counted again finishing its drop: %d delivered, was %d", got, countsBefore)
	}

	// A day a crash left detached (between the drop's two steps) goes at
	// the next pass; its parent no longer reads it.
	gone := next.Add(4 * 24 * time.Hour)
	if _, err := s.pool.Exec(ctx, `ALTER TABLE events DETACH PARTITION events`+dayName(gone)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Purge(ctx, now, store.PurgeCursor{}, 100); err != nil {
		t.Fatal(err)
	}
	if exists(t, s, "events"+dayName(gone)) {
		t.Errorf("a detached day's table is still there after a pass")
	}
}

// A day with a delivery a replay made pending, or an event created inside
// the window (a clock that was behind), is not dropped.
func TestRetentionKeepsADayWithPendingWork(t *testing.T) {
	s, _, day := daysAhead(t)
	ctx := t.Context()
	late := day.Add(3 * 24 * time.Hour)
	sub := activeSub(t, s, "a.example:443")
	r := insert(t, s, eventAt(day.Add(time.Hour), 0, "", sub))
	d := r[0].Deliveries[0]
	if err := s.DeliveryRecordResults(ctx, []store.AttemptResult{{Attempt: core.Attempt{DeliveryID: d.ID, N: 1, StartedAt: d.CreatedAt,
		StatusCode: 500}, State: core.DeliveryFailed, Now: d.CreatedAt}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeliveryReplay(ctx, "", d.ID, late); err != nil {
		t.Fatal(err)
	}
	// Its created_at inside the window keeps an event's day too.
	other := day.Add(24 * time.Hour)
	insertAt := eventAt(other.Add(time.Hour), 0, "", sub)
	insertAt.Event.CreatedAt = late
	insertAt.Deliveries[0].State = core.DeliverySkipped
	insert(t, s, insertAt)
	if _, err := s.Purge(ctx, late.Add(-time.Minute), store.PurgeCursor{}, 100); err != nil {
		t.Fatal(err)
	}
	if !exists(t, s, "deliveries"+dayName(day)) {
		t.Errorf("the day of a replayed (pending) delivery was dropped")
	}
	if !exists(t, s, "events"+dayName(other)) {
		t.Errorf("a day holding an event created after the cutoff was dropped")
	}
	var n int
	if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n)
	}); err != nil || n != 2 {
		t.Errorf("%d events are left (%v), want both", n, err)
	}
}

// A schema of the release before partitions keeps its history: the tables
// become the legacy partitions, an event and its key read back, new events
// go to the days, and retention removes the old rows by batches.
func TestUpgradeKeepsHistoryInTheLegacyPartition(t *testing.T) {
	ctx := t.Context()
	u := testenv.PostgresSchema(t)
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateTo(ctx, conn, 16); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-48 * time.Hour).UTC()
	evt, dlv := idAt("evt", old), idAt("dlv", old)
	for _, q := range []string{
		`INSERT INTO subscriptions (id, tenant_id, url, host, event_types, secret, state, created_at, updated_at)
			VALUES ('sub_1', 'default', 'https://h.example/', 'h.example:443', '{*}', '', 'active', now(), now())`,
		`INSERT INTO events (id, tenant_id, type, payload, idempotency_key, created_at)
			VALUES ('` + evt + `', 'default', 't', '{}', 'old-key', $1)`,
		`INSERT INTO deliveries (id, event_id, subscription_id, tenant_id, event_type, host, shard, state, attempt_count,
				round_started_at, created_at, updated_at)
			VALUES ('` + dlv + `', '` + evt + `', 'sub_1', 'default', 't', 'h.example:443', 1, 'delivered', 1, $1, $1, $1)`,
		`INSERT INTO attempts (delivery_id, n, started_at, duration_ns, status_code) VALUES ('` + dlv + `', 1, $1, 1000, 200)`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, old)
		}
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close(ctx)

	s := openURL(t, u)
	if _, ds, err := s.EventGet(ctx, "", evt); err != nil || len(ds) != 1 || ds[0].State != core.DeliveryDelivered {
		t.Fatalf("the old event after the upgrade: %v, %v", ds, err)
	}
	sub, err := s.SubscriptionGet(ctx, "", "sub_1")
	if err != nil {
		t.Fatal(err)
	}
	dup := eventAt(time.Now(), 0, "old-key", sub)
	fresh := eventAt(time.Now(), 0, "", sub)
	res := insert(t, s, dup, fresh)
	if !res[0].Duplicate || res[0].EventID != evt {
		t.Errorf("the old key answered %+v, want the old event %s", res[0], evt)
	}
	var where string
	if err := s.pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM events WHERE id = $1`, fresh.Event.ID).Scan(&where); err != nil ||
		where == "events_legacy" {
		t.Errorf("a new event went to %q (%v), want a day's partition", where, err)
	}
	r, err := s.Purge(ctx, time.Now().Add(-time.Hour), store.PurgeCursor{}, 100)
	if err != nil || r.Removed != 1 {
		t.Fatalf("Purge: %+v, %v; want the old event removed", r, err)
	}
	if _, _, err := s.EventGet(ctx, "", evt); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the old event after retention: %v", err)
	}
	if n := orphans(t, s.pool); n != 0 {
		t.Errorf("%d deliveries or attempts left without their event or delivery", n)
	}
	if again := insert(t, s, eventAt(time.Now(), 0, "old-key", sub)); again[0].Duplicate {
		t.Errorf("the removed event's key still answers %s", again[0].EventID)
	}
}

// A day dropped (detached, its files not yet removed) and wanted again is
// made again: a purge with a cutoff past the days ahead drops them all,
// and another node's next pass makes them while the first has still to
// remove the detached tables.
func TestADroppedDayIsMadeAgain(t *testing.T) {
	s := openURL(t, testenv.PostgresSchema(t))
	ctx := t.Context()
	now := time.Now().UTC()
	last := dayName(now.Truncate(24 * time.Hour).Add(3 * 24 * time.Hour))
	for _, p := range partitioned {
		if _, err := s.pool.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s`, p.table, p.table+last)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ensurePartitions(ctx, now); err != nil {
		t.Fatalf("making the dropped day again: %v", err)
	}
	for _, p := range partitioned {
		var attached bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass($1))`, p.table+last).Scan(&attached); err != nil {
			t.Fatal(err)
		}
		if !attached {
			t.Errorf("%s is not attached again", p.table+last)
		}
	}
	sub := activeSub(t, s, "h.example:443")
	at := now.Truncate(24 * time.Hour).Add(4*24*time.Hour - time.Millisecond)
	if _, err := s.EventInsertBatch(ctx, []store.EventInsert{eventAt(at, 0, "", sub)}); err != nil {
		t.Fatalf("an event of the day made again: %v", err)
	}
	// What dropDetached removes now is nothing of the day made again.
	if err := s.dropDetached(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, `id >= $1`, core.IDFloor("dlv", at.Truncate(24*time.Hour))); n != 1 {
		t.Errorf("%d deliveries in the day made again after removing detached days, want 1", n)
	}
}

// A day's drop beside writers fails none of them. Its lock on the three
// tables waited behind writers that, holding one of the tables, waited
// behind it for another: PostgreSQL broke those deadlocks by failing a
// refill (37 in 40 s of this load before ddlLockTimeout), and a result
// write then failed on a prepared statement the failure left unknown; the
// writers stalled meanwhile (about 100 writes in 10 s, against 3,000).
// Locking the three tables at once, a drop that gave way instead seldom
// had them while the writers ran (0 or 1 of 3 days in a minute). The load
// runs until the passes end: each day goes whole beside it, and nothing
// is left without its event or delivery.
func TestDroppingDaysBesideWritersFailsNone(t *testing.T) {
	s, _, day := daysAhead(t)
	ctx := t.Context()
	subs := []core.Subscription{activeSub(t, s, "a.example:443"), activeSub(t, s, "b.example:443"), activeSub(t, s, "c.example:443")}
	delivered := func(rs []store.EventInsertResult) []store.AttemptResult {
		var out []store.AttemptResult
		for _, r := range rs {
			for _, d := range r.Deliveries {
				out = append(out, store.AttemptResult{SubscriptionID: d.SubscriptionID, State: core.DeliveryDelivered, Now: d.CreatedAt,
					Attempt: core.Attempt{DeliveryID: d.ID, N: 1, StartedAt: d.CreatedAt, StatusCode: 200}})
			}
		}
		return out
	}
	const days = 3
	for d := range days {
		var batch []store.EventInsert
		for i := range 50 {
			batch = append(batch, eventAt(day.Add(time.Duration(d)*24*time.Hour+time.Duration(i)*time.Minute), 0, "", subs...))
		}
		if err := s.DeliveryRecordResults(ctx, delivered(insert(t, s, batch...))); err != nil {
			t.Fatal(err)
		}
	}

	loadEnds := time.Now().Add(time.Minute) // a bound: the passes end the load
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []string
	var writes, refills int
	fail := func(what string, err error) bool {
		if err != nil {
			mu.Lock()
			failed = append(failed, what+": "+err.Error())
			mu.Unlock()
		}
		return err != nil
	}
	going := func() bool {
		select {
		case <-stop:
			return false
		default:
			return time.Now().Before(loadEnds)
		}
	}
	// The writers' day is past every cutoff: days between now and the
	// purged ones go too, when they hold no pending work.
	var seq atomic.Int64
	loadDay := day.Add((days + 1) * 24 * time.Hour)
	written := func() store.EventInsert {
		return eventAt(loadDay.Add(time.Duration(seq.Add(1))*time.Millisecond), 0, "", subs...)
	}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for going() {
				rs, err := s.EventInsertBatch(ctx, []store.EventInsert{written(), written()})
				if !fail("insert", err) && !fail("results", s.DeliveryRecordResults(ctx, delivered(rs))) {
					mu.Lock()
					writes++
					mu.Unlock()
				}
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A refill every few milliseconds: many lanes' backlogs.
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for i := 0; going(); i++ {
				<-tick.C
				_, _, err := s.DeliveryDue(ctx, store.DeliveryDueParams{SubscriptionID: subs[i%len(subs)].ID, Now: time.Now(), Limit: 100})
				fail("refill", err)
				_, err = s.DeliveryPendingSubscriptions(ctx, nil)
				fail("pending subscriptions", err)
				mu.Lock()
				refills++
				mu.Unlock()
			}
		}()
	}
	whole := 0
	for d := range days {
		at := day.Add(time.Duration(d) * 24 * time.Hour)
		var cur store.PurgeCursor
		for {
			res, err := s.Purge(ctx, at.Add(24*time.Hour), cur, 1000)
			if err != nil {
				t.Fatalf("purging %s: %v", dayName(at), err)
			}
			if cur == (store.PurgeCursor{}) && !exists(t, s, "events"+dayName(at)) {
				whole++
			}
			if res.Looked == 0 {
				break
			}
			cur = res.Next
		}
	}
	beside := going()
	close(stop)
	wg.Wait()
	t.Logf("%d of %d days dropped whole; %d writes and %d refills beside", whole, days, writes, refills)
	if !beside || whole != days || writes == 0 {
		t.Errorf("%d of %d days dropped whole beside %d writes, all before the load's bound: %v; want every day, beside writes",
			whole, days, writes, beside)
	}
	if len(failed) > 0 {
		t.Errorf("%d writers failed beside the drops, the first: %v", len(failed), failed[:min(5, len(failed))])
	}
	var old int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE created_at < $1`, day.Add(days*24*time.Hour)).Scan(&old); err != nil || old != 0 {
		t.Errorf("%d events of the purged days are left (%v)", old, err)
	}
	if n := orphans(t, s.pool); n != 0 {
		t.Errorf("%d deliveries or attempts are left without their event or delivery", n)
	}
}

// dailyDelivered is what the daily counts hold as delivered for a subscription.
func dailyDelivered(t *testing.T, s *Store, subID string) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(t.Context(), `SELECT coalesce(sum(delivered), 0) FROM daily_counts WHERE subscription_id = $1`, subID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
