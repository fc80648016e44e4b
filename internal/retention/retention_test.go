package retention

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"hookd/internal/store"
)

// fakeStore answers Purge from a script and records the cutoffs it got.
type fakeStore struct {
	store.Store
	mu      sync.Mutex
	answers []int
	cutoffs []time.Time
}

func (f *fakeStore) Purge(_ context.Context, cutoff time.Time, limit int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cutoffs = append(f.cutoffs, cutoff)
	if len(f.answers) == 0 {
		return 0, nil
	}
	n := min(f.answers[0], limit)
	f.answers = f.answers[1:]
	return n, nil
}

func (f *fakeStore) calls() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.cutoffs...)
}

// A pass repeats full batches until a short one, with the cutoff the
// retention window before the pass; the next pass comes an hour later.
func TestPassesRemoveBatchesUntilShortHourly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{answers: []int{batch, batch, 3}}
		keep := 30 * 24 * time.Hour
		start := time.Now()
		p := Start(f, keep, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
