package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgSchema makes a schema of its own for one test on HOOKD_TEST_POSTGRES_URL,
// dropped at the end, and returns the URL that selects it (search_path);
// without the variable the test is skipped.
func pgSchema(t *testing.T) string {
	t.Helper()
	base := os.Getenv("HOOKD_TEST_POSTGRES_URL")
	if base == "" {
		t.Skip("HOOKD_TEST_POSTGRES_URL not set: PostgreSQL tests skipped")
	}
	var b [6]byte
	rand.Read(b[:])
	schema := "hookd_test_" + hex.EncodeToString(b[:])
	pgExec(t, base, "CREATE SCHEMA "+schema)
	t.Cleanup(func() { pgExec(t, base, "DROP SCHEMA "+schema+" CASCADE") })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func pgExec(t *testing.T, db, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// pgCount runs a count query on db.
func pgCount(t *testing.T, db, sql string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
