package postgres

import (
	"testing"
	"time"

	"hookd/internal/store"
	"hookd/internal/testenv"
)

// A published breaker reads back as published, stamped with the time.
func TestCircuitsRoundTrip(t *testing.T) {
	s := openURL(t, testenv.PostgresSchema(t))
	ctx := t.Context()
	if _, ok, err := s.CircuitGet(ctx, "a.example:443"); err != nil || ok {
		t.Fatalf("an unpublished host: %v, %v", ok, err)
	}
	retry := time.Now().Add(time.Minute).UTC().Truncate(time.Microsecond)
	before := time.Now()
	if err := s.CircuitsPublish(ctx, []store.HostCircuit{{Host: "a.example:443", Open: true, RetryAt: retry},
		{Host: "b.example:443"}}); err != nil {
		t.Fatal(err)
	}
	c, ok, err := s.CircuitGet(ctx, "a.example:443")
	if err != nil || !ok || !c.Open || !c.RetryAt.Equal(retry) || c.UpdatedAt.Before(before.Add(-time.Second)) {
		t.Fatalf("read back %+v, %v, %v", c, ok, err)
	}
	if err := s.CircuitsPublish(ctx, []store.HostCircuit{{Host: "a.example:443"}}); err != nil {
		t.Fatal(err)
	}
	if c, _, _ := s.CircuitGet(ctx, "a.example:443"); c.Open || !c.RetryAt.IsZero() {
		t.Fatalf("after closing: %+v", c)
	}
}
