package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresURL is HOOKD_TEST_POSTGRES_URL; without it the test is skipped,
// saying so.
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("HOOKD_TEST_POSTGRES_URL")
	if u == "" {
		tb.Skip("HOOKD_TEST_POSTGRES_URL not set: PostgreSQL tests skipped")
	}
	return u
}

// PostgresSchema makes an empty schema of its own for one test, dropped
// (with everything in it) when the test ends, and returns the URL that
// selects it through search_path.
func PostgresSchema(tb testing.TB) string {
	tb.Helper()
	base := PostgresURL(tb)
	var b [6]byte
	rand.Read(b[:])
	schema := "hookd_test_" + hex.EncodeToString(b[:])
	PostgresExec(tb, base, "CREATE SCHEMA "+schema)
	tb.Cleanup(func() { PostgresExec(tb, base, "DROP SCHEMA "+schema+" CASCADE") })
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// PostgresExec runs one statement on db.
func PostgresExec(tb testing.TB, db, sql string, args ...any) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
}

// PostgresCount runs one query on db that answers a single integer.
func PostgresCount(tb testing.TB, db, sql string, args ...any) int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
	return n
}

// PostgresRows renders a query's rows as text, one line per row, for a
// failure message.
func PostgresRows(tb testing.TB, db, sql string, args ...any) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return "connect: " + err.Error()
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return err.Error()
		}
		fmt.Fprintln(&b, vals...)
	}
	return b.String()
}
