package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"hookd/internal/app"
	"hookd/internal/core"
	"hookd/internal/seal"
	"hookd/internal/testenv"
)

func ring(t *testing.T, keys ...string) *seal.Keyring {
	t.Helper()
	k, err := seal.Parse(strings.Join(keys, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func keyFile(t *testing.T, keys ...string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(f, []byte(strings.Join(keys, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// backends runs fn on a fresh SQLite file and, with HOOKD_TEST_POSTGRES_URL,
// on a fresh PostgreSQL schema.
func backends(t *testing.T, fn func(t *testing.T, db string)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, filepath.Join(t.TempDir(), "hookd.db")) })
	t.Run("postgres", func(t *testing.T) { fn(t, testenv.PostgresSchema(t)) })
}

// rekey runs `hookd rekey` and returns what it printed.
func rekey(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(t.Context(), append([]string{"rekey"}, args...), &out, &errOut)
	return out.String(), err
}

// After a key is added first, rekey seals everything under it, so the old
// key can go; a second run changes nothing; --vacuum then rewrites the
// storage.
func TestRekeySealsEverythingUnderTheFirstKey(t *testing.T) {
	backends(t, func(t *testing.T, db string) {
		ctx := t.Context()
		oldKey, newKey := seal.NewKey(), seal.NewKey()
		st, err := app.OpenStore(ctx, db, ring(t, oldKey))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC().Truncate(time.Microsecond)
		sub := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: "https://a.example/hook",
			Host: "a.example:443", EventTypes: []string{"*"}, Secret: "whsec_bmV3LXNlY3JldA==", PrevSecret: "whsec_b2xkLXNlY3JldA==",
			PrevSecretExpiresAt: now.Add(time.Hour), Headers: map[string]string{"Authorization": "Bearer rekey-test"},
			State: core.SubActive, CreatedAt: now, UpdatedAt: now}
		if err := st.SubscriptionCreate(ctx, sub); err != nil {
			t.Fatal(err)
		}
		st.Close()

		newID := ring(t, newKey).IDs()[0]
		out, err := rekey(t, "--db", db, "--secret-key-file", keyFile(t, newKey, oldKey), "--batch", "1")
		if err != nil || !strings.Contains(out, "resealed 1 subscriptions under key "+newID) || strings.Contains(out, "warning") {
			t.Fatalf("rekey: %v\n%s", err, out)
		}
		st, err = app.OpenStore(ctx, db, ring(t, newKey)) // the old key dropped
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.SubscriptionGet(ctx, "", sub.ID)
		st.Close()
		if err != nil {
			t.Fatalf("with the new key alone: %v", err)
		}
		if got.Secret != sub.Secret || got.PrevSecret != sub.PrevSecret || got.Headers["Authorization"] != "Bearer rekey-test" {
			t.Fatalf("after rekey: %+v", got)
		}
		out, err = rekey(t, "--db", db, "--secret-key-file", keyFile(t, newKey), "--vacuum")
		if err != nil || !strings.Contains(out, "resealed 0 subscriptions") || !strings.Contains(out, "vacuumed") {
			t.Fatalf("rekey again with --vacuum: %v\n%s", err, out)
		}
	})
}

// rekey refuses what it cannot do, naming why, before changing anything.
func TestRekeyRefuses(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	db := filepath.Join(dir, "hookd.db")
	k := seal.NewKey()
	st, err := app.OpenStore(ctx, db, ring(t, k))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := st.SubscriptionCreate(ctx, core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant,
		URL: "https://a.example/", Host: "a.example:443", EventTypes: []string{"*"}, Secret: "whsec_eA==",
		State: core.SubActive, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	_, err = rekey(t, "--db", filepath.Join(dir, "missing.db"), "--secret-key-file", keyFile(t, k))
	if err == nil || !strings.Contains(err.Error(), "--db") {
		t.Errorf("a missing database: %v, want an error naming --db", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rekey created the missing database (stat: %v)", err)
	}
	if _, err = rekey(t, "--db", db); err == nil || !strings.Contains(err.Error(), "no secret key") {
		t.Errorf("no key and no key file: %v, want a refusal", err)
	}
	if _, err = rekey(t, "--db", db, "--secret-key-file", keyFile(t, k), "--batch", "0"); err == nil || !strings.Contains(err.Error(), "--batch") {
		t.Errorf("--batch 0: %v, want an error naming --batch", err)
	}
	_, err = rekey(t, "--db", db, "--secret-key-file", keyFile(t, seal.NewKey()))
	if !errors.Is(err, seal.ErrUnknownKey) || !strings.Contains(err.Error(), ring(t, k).IDs()[0]) {
		t.Errorf("without the key the values are under: %v, want ErrUnknownKey naming key %s", err, ring(t, k).IDs()[0])
	}
}

// rekey while a node (new key first, old key second) rotates secrets: every
// rotation's secret is the one stored, all under the new key. Rekey and a
// change take turns on each row.
func TestRekeyWhileANodeRotates(t *testing.T) {
	backends(t, func(t *testing.T, db string) {
		ctx := t.Context()
		oldKey, newKey := seal.NewKey(), seal.NewKey()
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		a, err := app.Open(ctx, app.Config{DB: db, AdminToken: "rekey-admin", Version: "test", Log: log, Keys: ring(t, oldKey)})
		if err != nil {
			t.Fatal(err)
		}
		client, stop := serveApp(t, a)
		var ids []string
		for i := range 30 {
			out := client.Must(201, "POST", "/v1/subscriptions", map[string]any{
				"url": fmt.Sprintf("https://h%d.example/", i), "event_types": []string{"*"}, "headers": map[string]string{"X-Key": "k"}})
			ids = append(ids, out["id"].(string))
		}
		stop()

		a, err = app.Open(ctx, app.Config{DB: db, AdminToken: "rekey-admin", Version: "test", Log: log, Keys: ring(t, newKey, oldKey)})
		if err != nil {
			t.Fatal(err)
		}
		client, stop = serveApp(t, a)
		defer stop()
		last := make([]string, len(ids))
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 3 {
				for i, id := range ids {
					if (i+round)%2 != 0 {
						continue
					}
					code, out := client.Do("POST", "/v1/subscriptions/"+id+"/rotate-secret", nil)
					if code != 200 {
						t.Errorf("rotate %s beside rekey: %d %v", id, code, out)
						return
					}
					last[i] = out["secret"].(string)
				}
			}
		}()
		out, err := rekey(t, "--db", db, "--secret-key-file", keyFile(t, newKey, oldKey), "--batch", "4")
		wg.Wait()
		if err != nil {
			t.Fatalf("rekey beside a node: %v\n%s", err, out)
		}
		stop()
		st, err := app.OpenStore(ctx, db, ring(t, newKey)) // the old key dropped
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		for i, id := range ids {
			got, err := st.SubscriptionGet(ctx, "", id)
			if err != nil {
				t.Fatalf("%s with the new key alone: %v", id, err)
			}
			if last[i] != "" && got.Secret != last[i] {
				t.Errorf("%s: stored secret is not the last rotation's: a rotation was lost", id)
			}
		}
	})
}

// serveApp serves a on a loopback port and returns an admin client and a
// stop that shuts it down (once).
func serveApp(t *testing.T, a *app.App) (*testenv.Client, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go a.Serve(ln)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			a.Shutdown(ctx)
		})
	}
	t.Cleanup(stop)
	return &testenv.Client{T: t, Base: "http://" + ln.Addr().String(), Token: "rekey-admin"}, stop
}
