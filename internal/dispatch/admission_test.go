package dispatch

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

// paced drives a bucket the way the dispatcher does, with every wake-up
// late by up to lateness (timers and scheduling), and returns the send times.
func paced(rate float64, lateness time.Duration, gaps bool, d time.Duration) []time.Time {
	var k bucket
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Unix(1_000_000, 0)
	var sent []time.Time
	for now := start; now.Before(start.Add(d)); {
		if k.ready(now, rate) {
			k.take(now)
			sent = append(sent, now)
			continue
		}
		now = k.nextToken(now).Add(time.Duration(rng.Int64N(int64(lateness) + 1)))
		if gaps && rng.IntN(500) == 0 {
			now = now.Add(time.Duration(rng.Int64N(int64(2 * time.Second)))) // idle, then catch up
		}
	}
	return sent
}

// maxInAnySecond counts the most sends that started within one second of
// each other (every window [t, t+1s) starting at a send).
func maxInAnySecond(sent []time.Time) int {
	most := 0
	for i, t := range sent {
		j := sort.Search(len(sent), func(j int) bool { return !sent[j].Before(t.Add(time.Second)) })
		most = max(most, j-i)
	}
	return most
}

// The rate is a ceiling in every second, and with late wake-ups it is
// still reached: the burst-one bucket this replaced drained at 40 % of a
// 2000/s limit when each wake-up came 0.7 ms late.
func TestBucketReachesItsRateAndNeverExceedsItInAnySecond(t *testing.T) {
	for _, c := range []struct {
		rate     float64
		lateness time.Duration
		gaps     bool
	}{
		{200, 2 * time.Millisecond, false},
		{2000, 1400 * time.Microsecond, false}, // 0.7 ms late on average
		{5000, time.Millisecond, false},
		{2000, time.Millisecond, true},
		{0.5, 10 * time.Millisecond, false},
	} {
		const d = 20 * time.Second
		sent := paced(c.rate, c.lateness, c.gaps, d)
		if most := maxInAnySecond(sent); float64(most) > max(1, c.rate) {
			t.Errorf("rate %v, lateness ≤%v, gaps %v: %d sends within one second", c.rate, c.lateness, c.gaps, most)
		}
		if c.gaps {
			continue
		}
		if want := 0.95 * c.rate * d.Seconds(); float64(len(sent)) < want {
			t.Errorf("rate %v, lateness ≤%v: %d sends in %v, want at least %.0f (95 %%)", c.rate, c.lateness, len(sent), d, want)
		}
	}
}

// The count of a second's sends follows the rate up (a ramp, a raised
// rate_limit): the record of sends grows and still counts exactly.
func TestBucketFollowsARisingRate(t *testing.T) {
	var k bucket
	now := time.Unix(1_000_000, 0)
	var sent []time.Time
	for i := range 30 {
		rate := float64(10 + 10*i) // 10/s up to 300/s, a second each
		for end := now.Add(time.Second); now.Before(end); {
			if k.ready(now, rate) {
				k.take(now)
				sent = append(sent, now)
				continue
			}
			now = k.nextToken(now)
		}
	}
	if most := maxInAnySecond(sent); most > 300 {
		t.Errorf("%d sends within one second, the highest rate was 300/s", most)
	}
	if len(sent) < 4400 { // 10+20+…+300 = 4650; a little is lost at each step
		t.Errorf("%d sends, want about 4650", len(sent))
	}
}
