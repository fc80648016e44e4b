package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// schemaPrefix names the schemas freshSchema makes (a test sets its own).
var schemaPrefix = "hookd_bench_"

func isPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// freshSchema gives an in-process PostgreSQL node a schema of its own, as
// the embedded default gets a fresh file: a run must not inherit another
// run's subscriptions and pending work. A URL that names a search_path is
// used as given. It returns the URL to open and a drop for afterwards.
func freshSchema(ctx context.Context, db string) (string, func(), error) {
	u, err := url.Parse(db)
	if err != nil {
		return "", nil, fmt.Errorf("--db: %w", err)
	}
	q := u.Query()
	if q.Get("search_path") != "" {
		return db, func() {}, nil
	}
	var b [6]byte
	rand.Read(b[:])
	schema := schemaPrefix + hex.EncodeToString(b[:])
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return "", nil, fmt.Errorf("--db: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return "", nil, fmt.Errorf("--db: creating schema %s: %w", schema, err)
	}
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, db); err == nil {
			c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
			c.Close(ctx)
		}
	}
	return u.String(), drop, nil
}
