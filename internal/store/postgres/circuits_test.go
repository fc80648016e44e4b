package postgres

import (
	"testing"
	"time"

	"hookd/internal/store"
	"hookd/internal/testenv"
)

// A published breaker reads back as published, its times measured by the
// database: the retry time counts down, the age counts up.
func TestCircuitsRoundTrip(t *testing.T) {
	s := openURL(t, testenv.PostgresSchema(t))
	ctx := t.Context()
	if _, ok, err := s.CircuitGet(ctx, "a.example:443"); err != nil || ok {
		t.Fatalf("an unpublished host: %v, %v", ok, err)
	}
	if err := s.CircuitsPublish(ctx, []store.HostCircuit{{Host: "a.example:443", Open: true, RetryIn: time.Minute},
		{Host: "b.example:443"}}); err != nil {
		t.Fatal(err)
	}
	c, ok, err := s.CircuitGet(ctx, "a.example:443")
	if err != nil || !ok || !c.Open || c.RetryIn <= 50*time.Second || c.RetryIn > time.Minute ||
		c.Age < 0 || c.Age > 10*time.Second {
		t.Fatalf("read back %+v, %v, %v", c, ok, err)
	}
	if b, ok, _ := s.CircuitGet(ctx, "b.example:443"); !ok || b.Open || b.RetryIn != 0 {
		t.Fatalf("a closed one read back %+v, %v", b, ok)
	}
	if err := s.CircuitsPublish(ctx, []store.HostCircuit{{Host: "a.example:443"}}); err != nil {
		t.Fatal(err)
	}
	if c, _, _ := s.CircuitGet(ctx, "a.example:443"); c.Open || c.RetryIn != 0 {
		t.Fatalf("after closing: %+v", c)
	}
}
