package shed

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

func quiet(threshold int) *Shedder {
	return New(Config{Threshold: threshold, Window: 5 * time.Minute, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// step feeds readings a minute apart and reports, after each, whether sub
// is shed.
func step(s *Shedder, start time.Time, sub string, pending ...int) []bool {
	var out []bool
	for i, n := range pending {
		counts := map[string]int{}
		if n > int(float64(s.cfg.Threshold)*Resume) { // as the store's count would leave it out
			counts[sub] = n
		}
		s.observe(start.Add(time.Duration(i)*time.Minute), counts)
		_, on := s.Shedding(sub)
		out = append(out, on)
	}
	return out
}

func TestShedsOnlyABacklogOverTheThresholdThatDoesNotShrink(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	for _, c := range []struct {
		name    string
		pending []int
		want    []bool
	}{
		// Over 1000 from the first minute, never smaller: shed once five
		// minutes of it have been seen.
		{"growing", []int{1200, 1300, 1300, 1400, 1500, 1600, 1700}, []bool{false, false, false, false, false, true, true}},
		// Over the threshold but draining: never shed.
		{"draining", []int{5000, 4800, 4600, 4400, 4200, 4000, 3800, 3600}, []bool{false, false, false, false, false, false, false, false}},
		// Under the threshold however long it stays: never shed.
		{"under", []int{900, 950, 990, 1000, 1000, 1000, 1000}, []bool{false, false, false, false, false, false, false}},
		// Shed, then drains: still shed above 80 % (no flapping), released at it.
		{"released", []int{2000, 2000, 2000, 2000, 2000, 2000, 1500, 900, 800, 2000}, []bool{false, false, false, false, false, true, true, true, false, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := step(quiet(1000), start, "sub_a", c.pending...)
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("shed after each reading: %v, want %v", got, c.want)
				}
			}
		})
	}
}

func TestOtherSubscriptionsAreNotShed(t *testing.T) {
	s := quiet(10)
	start := time.Unix(1_000_000, 0)
	for i := range 7 {
		s.observe(start.Add(time.Duration(i)*time.Minute), map[string]int{"sub_big": 50, "sub_small": 9})
	}
	if _, on := s.Shedding("sub_big"); !on {
		t.Error("sub_big, 50 pending for 6 minutes over a threshold of 10, is not shed")
	}
	if _, on := s.Shedding("sub_small"); on {
		t.Error("sub_small, under the threshold, is shed")
	}
	var none *Shedder
	if _, on := none.Shedding("sub_big"); on {
		t.Error("a nil shedder sheds")
	}
}

// Changed hears each beginning and ending once, with the beginning's time
// in both; a shed subscription paused ends too.
func TestChangedHearsEachBeginningAndEnding(t *testing.T) {
	var got []Change
	s := New(Config{Threshold: 1000, Window: 5 * time.Minute, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Changed: func(_ context.Context, c Change) { got = append(got, c) }})
	start := time.Unix(1_000_000, 0)
	min := func(i int) time.Time { return start.Add(time.Duration(i) * time.Minute) }
	step(s, start, "sub_a", 2000, 2000, 2000, 2000, 2000, 2000, 2100, 700)
	paused := false
	s.active = func(string) bool { return !paused }
	step(s, min(8), "sub_a", 2000, 2000, 2000, 2000, 2000, 2000, 2000)
	paused = true
	step(s, min(15), "sub_a", 2000)
	want := []Change{
		{SubscriptionID: "sub_a", Since: min(5), Pending: 2000},
		{SubscriptionID: "sub_a", Since: min(5), Ended: min(7)},
		{SubscriptionID: "sub_a", Since: min(13), Pending: 2000},
		{SubscriptionID: "sub_a", Since: min(13), Ended: min(15)},
	}
	if len(got) != len(want) {
		t.Fatalf("changes %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("changes %+v, want %+v", got, want)
		}
	}
}

// fakeCounter is a store's two readings.
type fakeCounter struct {
	counts map[string]int
	kept   map[string]time.Time
}

func (f fakeCounter) DeliveryPendingCounts(context.Context, int) (map[string]int, error) {
	return f.counts, nil
}
func (f fakeCounter) SubscriptionsShed(context.Context) (map[string]time.Time, error) {
	return f.kept, nil
}

// A node started while the store keeps two sheddings sheds the one still
// over at once, from when it began (it used to accept that backlog again
// for five minutes), and ends the other, telling when it began.
func TestStartTakesUpTheSheddingsTheStoreKeeps(t *testing.T) {
	began := time.Unix(1_000_000, 0).UTC()
	ended := make(chan Change, 10)
	s := New(Config{Threshold: 1000, Every: time.Hour, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Changed: func(_ context.Context, c Change) { ended <- c }})
	s.Start(fakeCounter{counts: map[string]int{"sub_over": 1500},
		kept: map[string]time.Time{"sub_over": began, "sub_drained": began.Add(time.Minute)}}, nil)
	defer s.Stop()
	var c Change
	select {
	case c = <-ended: // the first reading, at Start
	case <-time.After(10 * time.Second):
		t.Fatal("no end told for the shedding the store kept for a drained backlog")
	}
	if c.SubscriptionID != "sub_drained" || !c.Since.Equal(began.Add(time.Minute)) || c.Ended.IsZero() {
		t.Errorf("told %+v, want sub_drained's end, begun at %s", c, began.Add(time.Minute))
	}
	if since, on := s.Shedding("sub_over"); !on || !since.Equal(began) {
		t.Errorf("sub_over shed %v since %s, want shed since %s", on, since, began)
	}
	select {
	case c := <-ended:
		t.Errorf("also told %+v", c)
	default:
	}
}
