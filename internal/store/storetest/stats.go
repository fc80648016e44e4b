package storetest

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// statsFixture is one delivery as posted: created at, its attempts'
// durations and statuses, and the state it ends in.
type statsFixture struct {
	sub     int // index into the test's subscriptions
	created time.Time
	tries   []time.Duration
	codes   []int
	state   core.DeliveryState // pending, delivered or failed; skipped by deleting the subscription
}

// testDeliveryBuckets: every bucket equals the deliveries posted in it (by
// state, with their attempts, and the attempts' latency), per subscription
// and per tenant (a deleted subscription's included, another tenant's
// not), by minute, hour and UTC day, and for each of several subscriptions
// apart (DeliveryBucketsEach, another tenant's and unknown ones counting
// nothing); hour and day counts stay the same through a purge, after each
// event it removes, while the latency of what it removed is gone; minute
// counts are the rows still there.
func testDeliveryBuckets(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	subs := []core.Subscription{f.sub(a.ID, "h1.example:443"), f.sub(a.ID, "h2.example:443"), f.sub(b.ID, "h3.example:443")}
	day := time.Date(t0.Year(), t0.Month(), t0.Day(), 0, 0, 0, 0, time.UTC)
	at := func(h, m int) time.Time { return day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	ms := func(n ...int) []time.Duration {
		var out []time.Duration
		for _, v := range n {
			out = append(out, time.Duration(v)*time.Millisecond)
		}
		return out
	}
	fixtures := []statsFixture{
		{sub: 0, created: at(-1, 30), tries: ms(10, 30), codes: []int{500, 200}, state: core.DeliveryDelivered},
		{sub: 1, created: at(-1, 45), tries: ms(15), codes: []int{400}, state: core.DeliveryFailed},
		{sub: 0, created: at(7, 10), tries: ms(20), codes: []int{200}, state: core.DeliveryDelivered},
		{sub: 0, created: at(7, 20), tries: ms(40), codes: []int{500}, state: core.DeliveryPending}, // its event stays
		{sub: 2, created: at(7, 15), tries: ms(50), codes: []int{200}, state: core.DeliveryDelivered},
		{sub: 0, created: at(8, 0), tries: ms(12), codes: []int{200}, state: core.DeliveryDelivered}, // a bucket's first instant
		{sub: 1, created: at(8, 5), state: core.DeliveryPending},                                     // skipped below
		{sub: 1, created: at(8, 10), tries: ms(25), codes: []int{503}, state: core.DeliveryPending},  // skipped with its attempt
		{sub: 0, created: at(9, 0).Add(-time.Microsecond), tries: ms(5, 6, 7), codes: []int{500, 500, 400}, state: core.DeliveryFailed},
		{sub: 0, created: at(9, 0), tries: ms(1), codes: []int{200}, state: core.DeliveryDelivered}, // after the hours asked
	}
	var events []string
	for _, fx := range fixtures {
		e := ev(subs[fx.sub].TenantID, "t")
		e.CreatedAt = fx.created
		in := item(e, fx.created, subs[fx.sub])
		in.Deliveries[0].UpdatedAt = fx.created
		d := f.insert(in)[0].Deliveries[0]
		events = append(events, e.ID)
		var rs []store.AttemptResult
		for i, dur := range fx.tries {
			st, next := core.DeliveryPending, fx.created.Add(time.Hour)
			if i == len(fx.tries)-1 && fx.state != core.DeliveryPending {
				st, next = fx.state, time.Time{}
			}
			started := fx.created.Add(time.Duration(i) * time.Minute)
			rs = append(rs, store.AttemptResult{Attempt: core.Attempt{DeliveryID: d.ID, N: i + 1, StartedAt: started,
				Duration: dur, StatusCode: fx.codes[i]}, State: st, NextAttemptAt: next, Now: started})
		}
		noErr(t, "DeliveryRecordResults", s.DeliveryRecordResults(f.ctx, rs))
	}
	noErr(t, "SubscriptionDelete", s.SubscriptionDelete(f.ctx, a.ID, subs[1].ID, at(8, 30)))

	// kept says which fixtures' events are still there.
	kept := func() func(int) bool {
		in := map[int]bool{}
		for i, id := range events {
			if _, _, err := s.EventGet(f.ctx, "", id); err == nil {
				in[i] = true
			}
		}
		return func(i int) bool { return in[i] }
	}
	// want adds up the fixtures of whose subscriptions into p's buckets
	// (by the minute, those still kept), with the latency of those kept.
	want := func(p store.DeliveryBucketsParams, whose []int, kept func(int) bool) []store.DeliveryBucket {
		t.Helper()
		out, err := p.Buckets()
		noErr(t, "Buckets", err)
		durs := make([][]time.Duration, len(out))
		for n, fx := range fixtures {
			i := int(fx.created.Sub(p.Since) / p.Width)
			if !slices.Contains(whose, fx.sub) || fx.created.Before(p.Since) || i >= len(out) ||
				(p.Width == store.BucketMinute && !kept(n)) {
				continue
			}
			o := &out[i]
			switch {
			case fx.sub == 1 && fx.state == core.DeliveryPending:
				o.Skipped++
			case fx.state == core.DeliveryPending:
				o.Pending++
			case fx.state == core.DeliveryDelivered:
				o.Delivered++
			case fx.state == core.DeliveryFailed:
				o.Failed++
			}
			o.Attempts += int64(len(fx.tries))
			if kept(n) {
				durs[i] = append(durs[i], fx.tries...)
			}
		}
		for i, ds := range durs {
			if len(ds) > 0 {
				slices.Sort(ds)
				out[i].Timed = int64(len(ds))
				out[i].LatencyP50, out[i].LatencyP99 = percentileCont(0.5, ds), percentileCont(0.99, ds)
			}
		}
		return out
	}
	get := func(p store.DeliveryBucketsParams) []store.DeliveryBucket {
		t.Helper()
		got, err := s.DeliveryBuckets(f.ctx, p)
		noErr(t, "DeliveryBuckets", err)
		return got
	}
	counts := func(bs []store.DeliveryBucket) []store.DeliveryBucket {
		out := slices.Clone(bs)
		for i := range out {
			out[i].Timed, out[i].LatencyP50, out[i].LatencyP99 = 0, 0, 0
		}
		return out
	}
	hours := store.DeliveryBucketsParams{Since: at(-1, 0), Until: at(9, 0), Width: store.BucketHour}
	late := store.DeliveryBucketsParams{Since: at(8, 0), Until: at(10, 0), Width: store.BucketHour}
	days := store.DeliveryBucketsParams{Since: day.Add(-24 * time.Hour), Until: day.Add(24 * time.Hour), Width: store.BucketDay}
	empty := store.DeliveryBucketsParams{Since: day.Add(-72 * time.Hour), Until: day.Add(-24 * time.Hour), Width: store.BucketDay}
	minutes := store.DeliveryBucketsParams{Since: at(7, 0), Until: at(9, 0), Width: store.BucketMinute}
	midnight := store.DeliveryBucketsParams{Since: at(-1, 0), Until: at(1, 0), Width: store.BucketMinute}
	ranges := []struct {
		name string
		p    store.DeliveryBucketsParams
	}{{"hours", hours}, {"late hours", late}, {"days", days}, {"empty days", empty}, {"minutes", minutes}, {"midnight minutes", midnight}}
	type view struct {
		name  string
		p     store.DeliveryBucketsParams
		whose []int
	}
	var views []view
	for _, r := range ranges {
		for _, w := range []struct {
			name  string
			set   func(*store.DeliveryBucketsParams)
			whose []int
		}{
			{"s1", func(p *store.DeliveryBucketsParams) { p.SubscriptionID = subs[0].ID }, []int{0}},
			{"deleted s2", func(p *store.DeliveryBucketsParams) { p.SubscriptionID = subs[1].ID }, []int{1}},
			{"tenant a", func(p *store.DeliveryBucketsParams) { p.TenantID = a.ID }, []int{0, 1}},
			{"tenant b", func(p *store.DeliveryBucketsParams) { p.TenantID = b.ID }, []int{2}},
		} {
			p := r.p
			w.set(&p)
			views = append(views, view{r.name + " of " + w.name, p, w.whose})
		}
	}
	// each checks DeliveryBucketsEach of tenant a against its
	// subscriptions' views one by one; b's and an unknown one count nothing.
	each := func(when string, now func(int) bool) {
		t.Helper()
		asked := []string{subs[0].ID, subs[1].ID, subs[2].ID, core.NewID("sub")}
		whose := [][]int{{0}, {1}, nil, nil}
		for _, r := range ranges {
			p := r.p
			p.TenantID = a.ID
			got, err := s.DeliveryBucketsEach(f.ctx, p, asked)
			noErr(t, "DeliveryBucketsEach", err)
			if len(got) != len(asked) {
				t.Fatalf("DeliveryBucketsEach of %d subscriptions answers %d", len(asked), len(got))
			}
			for i := range asked {
				same(t, fmt.Sprintf("%s of subscription %d apart %s", r.name, i, when), got[i], counts(want(p, whose[i], now)))
			}
		}
	}
	all := func(int) bool { return true }
	for _, v := range views {
		same(t, v.name+" before a purge", get(v.p), want(v.p, v.whose, all))
	}
	each("before a purge", all)
	if got := get(hours); len(got) != 10 || !got[0].Start.Equal(at(-1, 0)) || !got[9].Start.Equal(at(8, 0)) {
		t.Fatalf("hour buckets from %v, %d of them; want 10 from %v", got[0].Start, len(got), at(-1, 0))
	}
	if got := get(minutes); len(got) != 120 || !got[0].Start.Equal(at(7, 0)) || !got[119].Start.Equal(at(8, 59)) {
		t.Fatalf("minute buckets from %v, %d of them; want 120 from %v", got[0].Start, len(got), at(7, 0))
	}

	// One event per call, then the rest: every hour's and day's counts
	// hold at every step, a minute's lose what went; the latency of what
	// went is gone.
	cutoff := day.Add(24 * time.Hour)
	r, err := s.Purge(f.ctx, cutoff, store.PurgeCursor{}, 1)
	noErr(t, "Purge", err)
	for r.Looked == 1 {
		now := kept()
		for _, v := range views {
			same(t, v.name+" during a purge", counts(get(v.p)), counts(want(v.p, v.whose, now)))
		}
		each("during a purge", now)
		r, err = s.Purge(f.ctx, cutoff, r.Next, 1)
		noErr(t, "Purge", err)
	}
	now := kept()
	left := 0
	for i := range events {
		if now(i) {
			left++
		}
	}
	if left != 1 {
		t.Fatalf("%d events kept after the purge, want 1 (the one with a pending delivery)", left)
	}
	for _, v := range views {
		same(t, v.name+" after a purge", get(v.p), want(v.p, v.whose, now))
	}
	each("after a purge", now)
	ofA := minutes
	ofA.TenantID = a.ID
	if got := get(ofA); got[20].Pending != 1 || got[10].Delivered != 0 {
		t.Errorf("minutes after a purge: 07:20 %+v, 07:10 %+v; want the pending one kept, the delivered one gone", got[20], got[10])
	}

	for _, p := range []store.DeliveryBucketsParams{
		{TenantID: a.ID, Since: at(0, 30), Until: at(2, 0), Width: store.BucketHour}, // not on a bucket's start
		{TenantID: a.ID, Since: at(2, 0), Until: at(2, 0), Width: store.BucketHour},  // empty
		{TenantID: a.ID, Since: at(3, 0), Until: at(2, 0), Width: store.BucketHour},  // backwards
		{TenantID: a.ID, Since: at(1, 0), Until: at(2, 0), Width: store.BucketDay},   // hours for days
		{TenantID: a.ID, Since: at(1, 0), Until: at(2, 0), Width: 2 * time.Hour},     // neither
		{TenantID: a.ID, Since: at(1, 0), Until: at(2, 0).Add(time.Microsecond), Width: store.BucketHour},
		{TenantID: a.ID, Since: at(1, 0).Add(time.Second), Until: at(2, 0), Width: store.BucketMinute},
		{TenantID: a.ID, Since: at(1, 0), Until: at(2, 0), Width: 2 * time.Minute},
	} {
		if _, err := s.DeliveryBuckets(f.ctx, p); err == nil {
			t.Errorf("DeliveryBuckets(%+v): no error", p)
		}
		if _, err := s.DeliveryBucketsEach(f.ctx, p, []string{subs[0].ID}); err == nil {
			t.Errorf("DeliveryBucketsEach(%+v): no error", p)
		}
	}
	if _, err := s.DeliveryBucketsEach(f.ctx, minutes, []string{subs[0].ID}); err == nil {
		t.Errorf("DeliveryBucketsEach without a tenant: no error")
	}
}

// testDeliveryBucketsSampled: a bucket holding more attempts than
// ExactUpTo measures its latency on a sample of about 1 in 32 of its
// deliveries, with IDs made as ingest makes them (each event's between
// two deliveries'), and its percentiles land near the exact ones; a
// bucket under it in the same call is read whole. The counts are exact.
func testDeliveryBucketsSampled(t *testing.T, s store.Store) {
	f := newFx(t, s)
	sub := f.sub(f.tenant().ID, "h1.example:443")
	hour := t0.Truncate(time.Hour)
	const n = 4000
	m := float64(n) / 32 // the sample's expected size
	// n attempts of 1 to n ms in the first hour, 10 of 1 to 10 ms in the next.
	var batch []store.EventInsert
	var took []time.Duration
	for i := range n + 10 {
		at, ms := hour.Add(time.Duration(i)*time.Millisecond), i+1
		if i >= n {
			at, ms = hour.Add(time.Hour), i-n+1
		}
		e := ev(sub.TenantID, "t")
		e.CreatedAt = at
		batch = append(batch, item(e, at, sub))
		took = append(took, time.Duration(ms)*time.Millisecond)
	}
	for len(batch) > 0 {
		k := min(len(batch), 500)
		var rs []store.AttemptResult
		for i, r := range f.insert(batch[:k]...) {
			d := r.Deliveries[0]
			rs = append(rs, store.AttemptResult{Attempt: core.Attempt{DeliveryID: d.ID, N: 1, StartedAt: d.CreatedAt,
				Duration: took[i], StatusCode: 200}, State: core.DeliveryDelivered, Now: d.CreatedAt})
		}
		noErr(t, "DeliveryRecordResults", s.DeliveryRecordResults(f.ctx, rs))
		batch, took = batch[k:], took[k:]
	}

	got, err := s.DeliveryBuckets(f.ctx, store.DeliveryBucketsParams{SubscriptionID: sub.ID,
		Since: hour, Until: hour.Add(2 * time.Hour), Width: store.BucketHour, ExactUpTo: n / 32})
	noErr(t, "DeliveryBuckets", err)
	big, small := got[0], got[1]
	if big.Delivered != n || big.Attempts != n || small.Delivered != 10 {
		t.Fatalf("counts %+v, %+v; want %d and 10 delivered", big, small, n)
	}
	// Four standard deviations of a binomial sample, either way.
	if d := math.Abs(float64(big.Timed) - m); d > 4*math.Sqrt(m) {
		t.Errorf("the big bucket's latency is over %d attempts, want a sample of about %.0f", big.Timed, m)
	}
	// Where a sample's percentile lands, as a quantile of the exact
	// durations: about p, give or take sqrt(p(1-p)/m), 0.045 at p50
	// (allowed: 3.5 times that); for p99 of so few, check it is above the
	// exact p90: that fails when at most two of the sample (12.5 expected)
	// lie above it, in 1 of 3,000 random samples.
	between := func(name string, got time.Duration, lo, hi float64) {
		if q := float64(got) / float64(time.Millisecond) / n; q < lo || q > hi {
			t.Errorf("%s %v is the exact p%.1f, want p%.1f to p%.1f", name, got, q*100, lo*100, hi*100)
		}
	}
	sd := math.Sqrt(0.25 / m)
	between("p50", big.LatencyP50, 0.5-3.5*sd, 0.5+3.5*sd)
	between("p99", big.LatencyP99, 0.9, 1)
	if small.Timed != 10 || small.LatencyP50 != 5500*time.Microsecond || small.LatencyP99 != 9910*time.Microsecond {
		t.Errorf("the small bucket: %d attempts, p50 %v p99 %v; want all 10, 5.5ms and 9.91ms", small.Timed, small.LatencyP50, small.LatencyP99)
	}
}

// percentileCont is PostgreSQL's percentile_cont over sorted durations.
func percentileCont(p float64, ds []time.Duration) time.Duration {
	pos := p * float64(len(ds)-1)
	lo := int(pos)
	hi := min(lo+1, len(ds)-1)
	return time.Duration(math.Round(float64(ds[lo]) + (pos-float64(lo))*float64(ds[hi]-ds[lo])))
}

// testDeliveryBucketsFarTimes: buckets past what a backend can store (the
// embedded store keeps times after 2262 as that day) answer zeros, and
// buckets around the Unix epoch answer.
func testDeliveryBucketsFarTimes(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	for _, p := range []store.DeliveryBucketsParams{
		{TenantID: a.ID, Since: time.Date(9999, 12, 30, 0, 0, 0, 0, time.UTC), Until: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), Width: store.BucketHour},
		{TenantID: a.ID, Since: time.Date(2262, 4, 1, 0, 0, 0, 0, time.UTC), Until: time.Date(2262, 5, 1, 0, 0, 0, 0, time.UTC), Width: store.BucketDay},
		{TenantID: a.ID, Since: time.Unix(0, 0), Until: time.Unix(0, 0).Add(3 * 24 * time.Hour), Width: store.BucketDay},
	} {
		got, err := s.DeliveryBuckets(f.ctx, p)
		noErr(t, "DeliveryBuckets", err)
		w, _ := p.Buckets()
		same(t, "far buckets", got, w)
	}
}
