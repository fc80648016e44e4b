package api

import (
	"testing"
	"time"
)

func TestBucketsRefillAtTheRateUpToTheBurst(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b := newBuckets(10, 20, func() time.Time { return now })
	for i := range 20 {
		if _, ok := b.take("a"); !ok {
			t.Fatalf("take %d of a burst of 20 refused", i+1)
		}
	}
	wait, ok := b.take("a")
	if ok || wait != 100*time.Millisecond {
		t.Fatalf("21st take: ok %v, wait %s; want refused, 100ms (one token at 10/s)", ok, wait)
	}
	if _, ok := b.take("b"); !ok {
		t.Fatal("another key shares a's bucket")
	}
	now = now.Add(250 * time.Millisecond) // 2.5 tokens back
	for i := range 2 {
		if _, ok := b.take("a"); !ok {
			t.Fatalf("take %d after 250ms refused", i+1)
		}
	}
	if wait, ok := b.take("a"); ok || wait != 50*time.Millisecond {
		t.Fatalf("third take after 250ms: ok %v, wait %s; want refused, 50ms", ok, wait)
	}
	now = now.Add(time.Hour) // back to the burst, not beyond
	for i := range 20 {
		if _, ok := b.take("a"); !ok {
			t.Fatalf("take %d after an hour refused", i+1)
		}
	}
	if _, ok := b.take("a"); ok {
		t.Fatal("an idle hour saved more than the burst")
	}
	// A clock that steps back neither adds nor removes tokens.
	now = now.Add(-time.Minute)
	if _, ok := b.take("a"); ok {
		t.Fatal("a clock step back refilled the bucket")
	}
}
