package main

import (
	"bytes"
	"database/sql"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"hookd/internal/testenv"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // to write the newer migration
)

// hookd migrate takes a postgres:// URL (here with a schema of its own) and
// never prints the password it was given.
func TestMigratePostgres(t *testing.T) {
	ctx := t.Context()
	u, err := url.Parse(testenv.PostgresSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	q := u.Query()
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
	// A migration this build does not know: a newer release's. Refused.
	if _, err := conn.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES (9999, '9999_future.sql')`); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"migrate", "--db", u.String()}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "newer than this build") {
		t.Fatalf("migrate on a newer schema: %v, want it refused", err)
	}
}

// A SQLite file a newer release migrated is refused by migrate and serve
// alike, and left as it was.
func TestNewerSQLiteSchemaIsRefused(t *testing.T) {
	ctx := t.Context()
	db := filepath.Join(t.TempDir(), "hookd.db")
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"migrate", "--db", db}, &out, &errOut); err != nil {
		t.Fatalf("migrate: %v (%s)", err, errOut.String())
	}
	raw, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`INSERT INTO schema_migrations VALUES (9999, '9999_future.sql', 0)`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	for _, cmd := range [][]string{{"migrate", "--db", db}, {"serve", "--db", db, "--addr", "127.0.0.1:0", "--admin-token", "t"}} {
		if err := run(ctx, cmd, &out, &errOut); err == nil || !strings.Contains(err.Error(), "newer than this build") {
			t.Errorf("%v on a newer schema: %v, want it refused", cmd, err)
		}
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
