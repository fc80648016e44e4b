package sqlite

import (
	"path/filepath"
	"strings"
	"testing"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/internal/store/storetest"
)

func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "hookd.db"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openTemp(t) })
}

func TestReopenKeepsDataAndSchema(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "hookd.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	tn := core.Tenant{ID: "ten_1", Name: "acme"}
	if err := s.TenantCreate(ctx, tn, core.APIKey{ID: "key_1", TenantID: tn.ID, Hash: "h1"}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	if err := Migrate(ctx, path); err != nil {
		t.Fatalf("Migrate on a migrated file: %v", err)
	}
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if _, err := s.TenantGet(ctx, "ten_1"); err != nil {
		t.Fatalf("tenant lost on reopen: %v", err)
	}
	var applied, defaults int
	ms, _ := migrations()
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if applied != len(ms) {
		t.Fatalf("schema_migrations has %d rows, want %d (one per migration)", applied, len(ms))
	}
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM tenants WHERE id = 'default'`).Scan(&defaults); err != nil {
		t.Fatal(err)
	}
	if defaults != 1 {
		t.Fatalf("%d default tenants", defaults)
	}
}

// The PRAGMAs must hold on every connection of both pools, not only on the
// first one opened.
func TestPragmasOnEveryConnection(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	check := func(what string, q func(query string, dest any) error) {
		t.Helper()
		var mode string
		var sync, fk, busy int
		for _, c := range []struct {
			q    string
			dest any
		}{{"PRAGMA journal_mode", &mode}, {"PRAGMA synchronous", &sync}, {"PRAGMA foreign_keys", &fk}, {"PRAGMA busy_timeout", &busy}} {
			if err := q(c.q, c.dest); err != nil {
				t.Fatalf("%s: %s: %v", what, c.q, err)
			}
		}
		if mode != "wal" || sync != 2 || fk != 1 || busy != 5000 {
			t.Fatalf("%s: journal_mode=%s synchronous=%d foreign_keys=%d busy_timeout=%d; want wal 2 1 5000", what, mode, sync, fk, busy)
		}
	}
	// Hold several read connections at once so the pool has to open new ones.
	var held []func() error
	for i := 0; i < 3; i++ {
		c, err := s.r.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c.Close)
		check("read connection", func(q string, d any) error { return c.QueryRowContext(ctx, q).Scan(d) })
		if _, err := c.ExecContext(ctx, `INSERT INTO tenants (id, name, created_at) VALUES ('x', 'x', 0)`); err == nil {
			t.Fatal("a read connection accepted a write")
		}
	}
	for _, c := range held {
		c()
	}
	wc, err := s.w.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	check("write connection", func(q string, d any) error { return wc.QueryRowContext(ctx, q).Scan(d) })
}

// The hot dispatcher queries must walk the pending-by-subscription index,
// never scan deliveries or sort.
func TestDueQueriesUseSubscriptionIndex(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"due":                   {dueQuery, []any{"h", 0, "[]", 10}},
		"next due":              {nextDueQuery, []any{"h", 0}},
		"pending subscriptions": {pendingSubscriptionsQuery, []any{nil}},
	} {
		rows, err := s.r.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q.sql, q.args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		p := strings.Join(plan, "\n")
		if !strings.Contains(p, "deliveries_subscription_due") || strings.Contains(p, "TEMP B-TREE") || strings.Contains(p, "SCAN d ") || strings.Contains(p, "SCAN deliveries") {
			t.Fatalf("%s plan:\n%s", name, p)
		}
	}
}
