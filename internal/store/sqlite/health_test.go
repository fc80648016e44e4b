package sqlite

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// bigEvent is an event of tenant default whose payload needs pages of its own.
func bigEvent() store.EventInsert {
	return store.EventInsert{Event: core.Event{ID: core.NewID("evt"), TenantID: core.DefaultTenant, Type: "a.b",
		Payload: []byte(`"` + string(bytes.Repeat([]byte("x"), 16<<10)) + `"`), CreatedAt: time.Now().UTC()}}
}

// TestFullDatabaseIsErrFull: a database that cannot grow answers ErrFull
// to an insert and to the health probe, and both work once it can again.
func TestFullDatabaseIsErrFull(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	if err := s.HealthPing(ctx); err != nil {
		t.Fatal(err)
	}
	// The probe's row written before the cap (an idle node's first probe):
	// its rewrite must still find the store full.
	if err := s.HealthWrite(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LimitPages(ctx, 1); err != nil { // no page beyond those in use
		t.Fatal(err)
	}
	if _, err := s.EventInsertBatch(ctx, []store.EventInsert{bigEvent()}); !errors.Is(err, store.ErrFull) {
		t.Fatalf("insert into a full database: %v, want ErrFull", err)
	}
	if err := s.HealthWrite(ctx); !errors.Is(err, store.ErrFull) {
		t.Fatalf("probe write into a full database: %v, want ErrFull", err)
	}
	if err := s.HealthPing(ctx); err != nil {
		t.Fatalf("a full database still reads: ping %v", err)
	}
	if _, err := s.LimitPages(ctx, 1<<30); err != nil {
		t.Fatal(err)
	}
	if err := s.HealthWrite(ctx); err != nil {
		t.Fatalf("probe write once there is room: %v", err)
	}
	if _, err := s.EventInsertBatch(ctx, []store.EventInsert{bigEvent()}); err != nil {
		t.Fatalf("insert once there is room: %v", err)
	}
}
