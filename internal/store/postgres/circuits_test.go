package postgres

import (
	"testing"
	"time"

	"hookd/internal/store"
	"hookd/internal/testenv"
)

// A published circuit reads back as published, its times measured by the
// database: the retry time and the pause count down, the age counts up.
// Hosts and endpoints (subscription IDs) share the board.
func TestCircuitsRoundTrip(t *testing.T) {
	s := openURL(t, testenv.PostgresSchema(t))
	ctx := t.Context()
	get := func(key string) (store.Circuit, bool) {
		t.Helper()
		cs, err := s.CircuitsGet(ctx, []string{key, "other:1"})
		if err != nil {
			t.Fatal(err)
		}
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
	if err := s.CircuitsPublish(ctx, []store.Circuit{{Key: "a.example:443", Open: true, RetryIn: time.Minute},
		{Key: "b.example:443"}, {Key: "sub_1", PausedFor: time.Minute}}); err != nil {
		t.Fatal(err)
	}
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
	if err := s.CircuitsPublish(ctx, []store.Circuit{{Key: "a.example:443"}, {Key: "sub_1"}}); err != nil {
		t.Fatal(err)
	}
	if c, _ := get("a.example:443"); c.Open || c.RetryIn != 0 {
		t.Fatalf("after closing: %+v", c)
	}
	if e, _ := get("sub_1"); e.PausedFor != 0 {
		t.Fatalf("after the pause: %+v", e)
	}
}
