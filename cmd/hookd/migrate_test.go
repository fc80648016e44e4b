package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// hookd migrate takes a postgres:// URL (here with a schema of its own) and
// never prints the password it was given.
func TestMigratePostgres(t *testing.T) {
	base := os.Getenv("HOOKD_TEST_POSTGRES_URL")
	if base == "" {
		t.Skip("HOOKD_TEST_POSTGRES_URL not set: PostgreSQL tests skipped")
	}
	ctx := t.Context()
	var b [6]byte
	rand.Read(b[:])
	schema := "hookd_test_" + hex.EncodeToString(b[:])
	admin := func(sql string) {
		t.Helper()
		conn, err := pgx.Connect(context.Background(), base)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	admin("CREATE SCHEMA " + schema)
	t.Cleanup(func() { admin("DROP SCHEMA " + schema + " CASCADE") })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("password", "s3cret") // trust auth ignores it
	u.RawQuery = q.Encode()

	for range 2 { // and again: a no-op
		var out, errOut bytes.Buffer
		if err := run(ctx, []string{"migrate", "--db", u.String()}, &out, &errOut); err != nil {
			t.Fatalf("migrate: %v (%s)", err, errOut.String())
		}
		if !strings.HasPrefix(out.String(), "migrated postgres") || strings.Contains(out.String(), "s3cret") {
			t.Fatalf("migrate printed %q", out.String())
		}
	}
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n == 0 {
		t.Fatalf("schema_migrations in %s: %d rows, %v", schema, n, err)
	}
}

func TestRedactDB(t *testing.T) {
	for in, want := range map[string]string{
		"./hookd.db": "./hookd.db",
		"postgres://u:pw@db:5432/hookd?sslmode=require":   "postgres://u:xxxxx@db:5432/hookd?sslmode=require",
		"postgresql://u@db/hookd?password=pw&sslmode=off": "postgresql://u@db/hookd?password=xxxxx&sslmode=off",
	} {
		if got := redactDB(in); got != want {
			t.Errorf("redactDB(%q) = %q, want %q", in, got, want)
		}
	}
}
