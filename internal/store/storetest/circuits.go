package storetest

import (
	"testing"
	"time"

	"hookd/internal/store"
)

// A published circuit reads back as published, its times measured by the
// store's clock: the retry time and the pause count down, the age counts
// up. Hosts and endpoints (subscription IDs) share the board. A batch
// naming one key twice is published, the last of it winning (one INSERT
// ... ON CONFLICT DO UPDATE may not touch a row twice: on PostgreSQL the
// whole batch failed with it).
func testCircuits(t *testing.T, st store.Store) {
	s, ok := st.(store.CircuitBoard)
	if !ok {
		t.Fatal("the store keeps no circuits (store.CircuitBoard)")
	}
	ctx := t.Context()
	get := func(key string) (store.Circuit, bool) {
		t.Helper()
		cs, err := s.CircuitsGet(ctx, []string{key, "other:1"})
		noErr(t, "CircuitsGet", err)
		for _, c := range cs {
			if c.Key == key {
				return c, true
			}
		}
		return store.Circuit{}, false
	}
	if _, ok := get("a.example:443"); ok {
		t.Fatal("an unpublished host was found")
	}
	noErr(t, "CircuitsPublish", s.CircuitsPublish(ctx, []store.Circuit{{Key: "a.example:443", Open: true, RetryIn: time.Minute},
		{Key: "b.example:443"}, {Key: "sub_1", PausedFor: time.Minute}, {Key: "sub_x"}, {Key: "sub_x", PausedFor: time.Hour},
		{Key: "sub_cut", CutRate: 2.5, CutCeiling: 10}}))
	c, ok := get("a.example:443")
	if !ok || !c.Open || c.RetryIn <= 50*time.Second || c.RetryIn > time.Minute || c.PausedFor != 0 ||
		c.Age < 0 || c.Age > 10*time.Second {
		t.Fatalf("read back %+v, %v", c, ok)
	}
	if b, ok := get("b.example:443"); !ok || b.Open || b.RetryIn != 0 {
		t.Fatalf("a closed one read back %+v, %v", b, ok)
	}
	if e, ok := get("sub_1"); !ok || e.Open || e.PausedFor <= 50*time.Second || e.PausedFor > time.Minute {
		t.Fatalf("a paused endpoint read back %+v, %v", e, ok)
	}
	if x, ok := get("sub_x"); !ok || x.PausedFor <= 50*time.Minute {
		t.Fatalf("a key published twice in one batch read back %+v, %v; want the last", x, ok)
	}
	if k, ok := get("sub_cut"); !ok || k.Open || k.PausedFor != 0 || k.CutRate != 2.5 || k.CutCeiling != 10 {
		t.Fatalf("an endpoint's rate cut read back %+v, %v", k, ok)
	}
	if b, _ := get("b.example:443"); b.CutRate != 0 || b.CutCeiling != 0 {
		t.Fatalf("a host with no cut read back %+v", b)
	}
	noErr(t, "CircuitsPublish", s.CircuitsPublish(ctx, []store.Circuit{{Key: "a.example:443"}, {Key: "sub_1"}, {Key: "sub_cut"}}))
	if c, _ := get("a.example:443"); c.Open || c.RetryIn != 0 {
		t.Fatalf("after closing: %+v", c)
	}
	if e, _ := get("sub_1"); e.PausedFor != 0 {
		t.Fatalf("after the pause: %+v", e)
	}
	if k, _ := get("sub_cut"); k.CutRate != 0 || k.CutCeiling != 0 {
		t.Fatalf("after the cut lifted: %+v", k)
	}
}
