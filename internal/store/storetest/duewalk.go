package storetest

import (
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// testDueMatchesOneWalk: random ordered backlogs (keys and unkeyed rows,
// tied due times, delivered and retrying rows, exclusions, small limits
// that cut the refill's walk short) give what one walk of every due row
// would: the first limit eligible by (next attempt, ID), and the earliest
// pending time after now. A fixed seed, so a failure repeats.
func testDueMatchesOneWalk(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	rng := rand.New(rand.NewSource(1))
	type row struct {
		d    core.Delivery
		live bool
	}
	for iter := range 60 {
		sub := f.sub(a.ID, "rand.example:443", ordered)
		nkeys := 1 + rng.Intn(4)
		n := 5 + rng.Intn(40)
		var rows []*row
		for i := 0; i < n; i++ {
			k := ""
			if rng.Intn(4) != 0 {
				k = string(rune('a' + rng.Intn(nkeys)))
			}
			next := at(time.Duration(rng.Intn(6)) * time.Second)
			d := f.insert(item(ev(a.ID, "t", orderKey(k)), next, sub))[0].Deliveries[0]
			rows = append(rows, &row{d: d, live: true})
		}
		for _, r := range rows {
			switch rng.Intn(6) {
			case 0:
				f.record(r.d, 1, 200, core.DeliveryDelivered, time.Time{})
				r.live = false
			case 1:
				nx := at(time.Duration(rng.Intn(10)) * time.Second)
				f.record(r.d, 1, 500, core.DeliveryPending, nx)
				r.d.NextAttemptAt = nx
			}
		}
		now := at(3 * time.Second)
		var excl []string
		for _, r := range rows {
			if r.live && rng.Intn(5) == 0 {
				excl = append(excl, r.d.ID)
			}
		}
		limit := 1 + rng.Intn(6)
		// What one walk of every pending row keeps.
		minSeq := map[string]int64{}
		for _, r := range rows {
			if r.live && r.d.Sequence > 0 {
				if m, ok := minSeq[r.d.OrderingKey]; !ok || r.d.Sequence < m {
					minSeq[r.d.OrderingKey] = r.d.Sequence
				}
			}
		}
		var elig []core.Delivery
		var later time.Time
		for _, r := range rows {
			if !r.live {
				continue
			}
			if r.d.NextAttemptAt.After(now) {
				if later.IsZero() || r.d.NextAttemptAt.Before(later) {
					later = r.d.NextAttemptAt
				}
				continue
			}
			if slices.Contains(excl, r.d.ID) {
				continue
			}
			if r.d.Sequence > 0 && minSeq[r.d.OrderingKey] != r.d.Sequence {
				continue
			}
			elig = append(elig, r.d)
		}
		slices.SortFunc(elig, func(x, y core.Delivery) int {
			if c := x.NextAttemptAt.Compare(y.NextAttemptAt); c != 0 {
				return c
			}
			return strings.Compare(x.ID, y.ID)
		})
		want := []string{}
		for _, d := range elig[:min(limit, len(elig))] {
			want = append(want, d.ID)
		}
		jobs, next, err := s.DeliveryDue(f.ctx, store.DeliveryDueParams{SubscriptionID: sub.ID, Now: now, Limit: limit, Exclude: excl})
		noErr(t, "DeliveryDue", err)
		got := ids(jobs, jobID)
		if !slices.Equal(got, want) {
			t.Fatalf("iter %d limit %d excl %d rows %d: got %v want %v", iter, limit, len(excl), n, got, want)
		}
		if !next.Equal(later) {
			t.Fatalf("iter %d: next %v want %v", iter, next, later)
		}
	}
}
