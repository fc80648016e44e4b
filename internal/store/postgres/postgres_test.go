package postgres

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"hookd/internal/core"
	"hookd/internal/seal"
	"hookd/internal/store"
	"hookd/internal/store/storetest"
	"hookd/internal/testenv"
)

// openURL opens a Store and closes it at the end of the test (before the
// schema is dropped: cleanups run last-registered first).
func openURL(tb testing.TB, u string) *Store {
	tb.Helper()
	s, err := Open(context.Background(), u, testKeys)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	testenv.PostgresURL(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		u := testenv.PostgresSchema(t)
		// Without foreign keys among the partitioned tables (0017), the
		// code keeps them whole: after every conformance test nothing is
		// left without its event or delivery. (Registered before the
		// store opens, so it runs after the store's own cleanups.)
		t.Cleanup(func() {
			conn, err := pgx.Connect(context.Background(), u)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			if n := orphans(t, conn); n != 0 {
				t.Errorf("%d deliveries or attempts are left without their event or delivery", n)
			}
		})
		return openURL(t, u)
	})
}

// Nodes starting together all migrate; exactly one applies each step, and
// migrating again changes nothing.
func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	u := testenv.PostgresSchema(t)
	ctx := t.Context()
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- Migrate(ctx, u) }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	s := openURL(t, u)
	tn := core.Tenant{ID: "ten_1", Name: "acme", CreatedAt: time.Now()}
	if err := s.TenantCreate(ctx, tn, core.APIKey{ID: "key_1", TenantID: tn.ID, Hash: "h1", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, u); err != nil {
		t.Fatalf("Migrate on a migrated schema: %v", err)
	}
	if _, err := s.TenantGet(ctx, tn.ID); err != nil {
		t.Fatalf("tenant lost by a second migration: %v", err)
	}
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	var applied, defaults, shards int
	for q, dst := range map[string]*int{
		`SELECT count(*) FROM schema_migrations`:               &applied,
		`SELECT count(*) FROM tenants WHERE id = 'default'`:    &defaults,
		`SELECT count(*) FROM shard_leases WHERE node IS NULL`: &shards,
	} {
		if err := s.pool.QueryRow(ctx, q).Scan(dst); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if applied != len(ms) || defaults != 1 || shards != core.NumShards {
		t.Fatalf("schema_migrations %d rows (want %d), %d default tenants, %d free shards (want %d)",
			applied, len(ms), defaults, shards, core.NumShards)
	}
}

// The tables live in the schema search_path names, not in public.
func TestSearchPathHonoured(t *testing.T) {
	u := testenv.PostgresSchema(t)
	s := openURL(t, u)
	var schema string
	if err := s.pool.QueryRow(t.Context(), `SELECT table_schema FROM information_schema.tables WHERE table_name = 'deliveries' AND table_schema = current_schema()`).Scan(&schema); err != nil {
		t.Fatalf("deliveries not in the search_path schema: %v", err)
	}
	pu, _ := url.Parse(u)
	if want := pu.Query().Get("search_path"); schema != want {
		t.Fatalf("tables in %q, want %q", schema, want)
	}
}

// testKeys seal every store of these tests: one key, so nodes on one
// schema, or a schema reopened, open what the others sealed.
var testKeys = func() *seal.Keyring {
	k, err := seal.Parse(seal.NewKey())
	if err != nil {
		panic(err)
	}
	return k
}()

func TestSealing(t *testing.T) {
	testenv.PostgresURL(t)
	storetest.RunSealing(t, func(t *testing.T) storetest.SealingBackend {
		u := testenv.PostgresSchema(t)
		return storetest.SealingBackend{
			Open: func(t *testing.T, keys *seal.Keyring) store.Store {
				s, err := Open(t.Context(), u, keys)
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
			Dump: func(t *testing.T) string { return testenv.PostgresRows(t, u, `SELECT * FROM subscriptions`) },
			SetColumn: func(t *testing.T, id, column, value string) {
				testenv.PostgresExec(t, u, `UPDATE subscriptions SET `+column+` = $1 WHERE id = $2`, value, id)
			},
		}
	})
}
