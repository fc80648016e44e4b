package retention

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"hookd/internal/outage"
	"hookd/internal/store"
)

// fakeStore answers Purge from a script and records the cutoffs it got.
type fakeStore struct {
	store.Store
	mu      sync.Mutex
	answers []int
	cutoffs []time.Time
	next    string
	pass    bool // the next call continues a pass
}

// Purge looks at answers[0] events (removing one in two) and goes on from
// a cursor named after the call's number; it checks it gets back the cursor
// it gave.
func (f *fakeStore) Purge(_ context.Context, cutoff time.Time, after store.PurgeCursor, limit int) (store.PurgeResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := f.cursor(); after != want {
		return store.PurgeResult{}, fmt.Errorf("call %d went on from %+v, want %+v", len(f.cutoffs), after, want)
	}
	f.cutoffs = append(f.cutoffs, cutoff)
	n := 0
	if len(f.answers) > 0 {
		n = min(f.answers[0], limit)
		f.answers = f.answers[1:]
	}
	f.next = fmt.Sprint("evt_", len(f.cutoffs))
	f.pass = n == limit
	return store.PurgeResult{Removed: n / 2, Looked: n, Next: store.PurgeCursor{EventID: f.next}}, nil
}

// cursor is what the next call should get: the last one's, within a pass.
func (f *fakeStore) cursor() store.PurgeCursor {
	if f.pass {
		return store.PurgeCursor{EventID: f.next}
	}
	return store.PurgeCursor{}
}

func (f *fakeStore) calls() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.cutoffs...)
}

// A pass goes on from each batch's cursor while batches come back full,
// with the cutoff the retention window before the pass; the next pass
// starts over an hour later.
func TestPassesRemoveBatchesUntilShortHourly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{answers: []int{batch, batch, 3}}
		keep := 30 * 24 * time.Hour
		start := time.Now()
		p := Start(f, keep, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
		synctest.Wait()
		got := f.calls()
		if len(got) != 3 {
			t.Fatalf("first pass made %d calls, want 3 (two full batches, one short)", len(got))
		}
		for _, c := range got {
			if !c.Equal(start.Add(-keep)) {
				t.Fatalf("cutoff %v, want %v", c, start.Add(-keep))
			}
		}
		time.Sleep(Every - time.Second)
		synctest.Wait()
		if n := len(f.calls()); n != 3 {
			t.Fatalf("%d calls before the hour was up, want 3", n)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		got = f.calls()
		if len(got) != 4 || !got[3].Equal(start.Add(Every-keep)) {
			t.Fatalf("after an hour: calls %v, want a fourth with cutoff %v", got, start.Add(Every-keep))
		}
		p.Stop()
	})
}

var errDown = fmt.Errorf("%w: dial tcp 127.0.0.1:5432: connection refused", store.ErrUnavailable)

// slowThenDown takes 3 s over its first batch (full), then fails.
type slowThenDown struct {
	store.Store
	calls int
	tr    *outage.Tracker
	then  error // tr.Err() as the second batch began
}

func (s *slowThenDown) Purge(context.Context, time.Time, store.PurgeCursor, int) (store.PurgeResult, error) {
	s.calls++
	if s.calls == 1 {
		time.Sleep(3 * time.Second)
		return store.PurgeResult{Looked: batch, Next: store.PurgeCursor{EventID: "evt_1"}}, nil
	}
	s.then = s.tr.Err()
	return store.PurgeResult{}, errDown
}

// healthAfter fails its checks until up is set.
type healthAfter struct {
	mu sync.Mutex
	up bool
}

func (h *healthAfter) check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.up {
		return nil
	}
	return errDown
}
func (h *healthAfter) HealthPing(context.Context) error  { return h.check() }
func (h *healthAfter) HealthWrite(context.Context) error { return h.check() }
func (h *healthAfter) HealthOutage(err error) error      { return err }

// A pass begun during an outage that ended while its first batch ran, and
// whose second batch then fails, reports a new outage: the failing batch
// began after the end, though the pass did not.
func TestAPassOutlastingAnOutageReportsTheNextOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &healthAfter{}
		tr := outage.New(outage.Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, h)
		tr.Start()
		defer tr.Stop()
		tr.Fail(time.Now(), errDown) // an outage, begun before the pass
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st := &slowThenDown{tr: tr}
		p := &Purger{st: st, keep: time.Hour, log: slog.New(slog.NewTextHandler(io.Discard, nil)), outage: tr, ctx: ctx}
		go func() {
			time.Sleep(time.Second)
			h.mu.Lock()
			h.up = true // the next probe ends the outage, within the first batch
			h.mu.Unlock()
		}()
		p.pass()
		if st.then != nil {
			t.Fatalf("the outage had not ended as the second batch began: %v", st.then)
		}
		if err := tr.Err(); err == nil {
			t.Fatal("the second batch failed after the outage ended: want a new outage, Err is nil")
		}
	})
}
