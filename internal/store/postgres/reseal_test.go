package postgres

import (
	"context"
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"hookd/internal/core"
	"hookd/internal/seal"
	"hookd/internal/store"
	"hookd/internal/testenv"
)

// A schema written by the release before sealing (migrations to 0006,
// secrets and a URL's credentials in the clear) is sealed when a node opens
// it: a SELECT of the raw rows finds no plaintext, and the subscription
// reads back whole, its URL's credentials as an Authorization header.
func TestPlaintextFromThePreviousReleaseIsSealed(t *testing.T) {
	ctx := t.Context()
	u := testenv.PostgresSchema(t)
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateTo(ctx, conn, 6); err != nil {
		t.Fatal(err)
	}
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("previous-release-secret-0123"))
	prev := "whsec_" + base64.StdEncoding.EncodeToString([]byte("previous-release-prev-4567"))
	if _, err := conn.Exec(ctx, `INSERT INTO subscriptions (id, tenant_id, url, host, event_types, secret, prev_secret,
		prev_secret_expires_at, state, created_at, updated_at)
		VALUES ('sub_1', 'default', 'https://alice:pa55w0rd-old@h.example/hook', 'h.example:443', '{*}', $1, $2, now(), 'active', now(), now())`,
		secret, prev); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if rows := testenv.PostgresRows(t, u, `SELECT * FROM subscriptions`); !strings.Contains(rows, secret) {
		t.Fatalf("the previous release's row holds no plaintext: the test proves nothing:\n%s", rows)
	}

	s := openURL(t, u)
	if n := s.SealedAtOpen(); n != 1 {
		t.Errorf("SealedAtOpen = %d, want 1", n)
	}
	rows := testenv.PostgresRows(t, u, `SELECT * FROM subscriptions`)
	for _, n := range []string{secret[6:], prev[6:], "pa55w0rd-old", "alice"} {
		if strings.Contains(rows, n) {
			t.Errorf("a raw row still holds %q after Open:\n%s", n, rows)
		}
	}
	sub, err := s.SubscriptionGet(ctx, "", "sub_1")
	if err != nil {
		t.Fatal(err)
	}
	if sub.Secret != secret || sub.PrevSecret != prev || sub.URL != "https://h.example/hook" ||
		sub.Headers["Authorization"] != "Basic "+base64.StdEncoding.EncodeToString([]byte("alice:pa55w0rd-old")) {
		t.Fatalf("after sealing: secret %q prev %q url %q headers %v", sub.Secret, sub.PrevSecret, sub.URL, sub.Headers)
	}
	if err := s.SubscriptionVacuum(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SubscriptionGet(ctx, "", "sub_1"); err != nil {
		t.Fatalf("after VACUUM FULL: %v", err)
	}
}

// A rekey batch and a node's change to one of its rows take turns: a
// rotation begun while the batch is between its read and its write waits
// for it, and is not overwritten with the secret the batch read.
func TestResealAndAChangeTakeTurns(t *testing.T) {
	ctx := t.Context()
	kOld, kNew := seal.NewKey(), seal.NewKey()
	keys := func(ks ...string) *seal.Keyring {
		k, err := seal.Parse(strings.Join(ks, "\n"))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	u := testenv.PostgresSchema(t)
	writer, err := Open(ctx, u, keys(kOld))
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	sub := activeSub(t, writer, "a.example:443") // sealed under the old key
	rekeyer, err := Open(ctx, u, keys(kNew, kOld))
	if err != nil {
		t.Fatal(err)
	}
	defer rekeyer.Close()
	// The node's connections carry a name of their own, to see them wait.
	pu, _ := url.Parse(u)
	q := pu.Query()
	app := "hookd-node-" + strings.ToLower(core.NewID("t"))
	q.Set("application_name", app)
	pu.RawQuery = q.Encode()
	node, err := Open(ctx, pu.String(), keys(kNew, kOld))
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()

	rotated := sub
	rotated.Secret, rotated.PrevSecret, rotated.UpdatedAt = "whsec_cm90YXRlZA==", sub.Secret, sub.UpdatedAt.Add(time.Second)
	done := make(chan error, 1)
	rekeyer.resealRead = func() {
		rekeyer.resealRead = nil
		go func() { done <- node.SubscriptionUpdate(context.WithoutCancel(ctx), rotated) }()
		// On until the rotation has either finished (the batch did not
		// lock the row) or waits on the batch's lock.
		testenv.Eventually(t, 10*time.Second, "the rotation to finish or wait for the batch", func() bool {
			if len(done) > 0 {
				return true
			}
			return testenv.PostgresCount(t, u, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
				WHERE NOT l.granted AND a.application_name = $1`, app) > 0
		})
	}
	res, err := rekeyer.SubscriptionReseal(ctx, store.ResealParams{All: true, Limit: 10})
	if err != nil || res.Changed != 1 {
		t.Fatalf("SubscriptionReseal: %+v, %v", res, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the rotation: %v", err)
	}
	after, err := Open(ctx, u, keys(kNew)) // the old key dropped
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	got, err := after.SubscriptionGet(ctx, "", sub.ID)
	if err != nil {
		t.Fatalf("with the new key alone: %v", err)
	}
	if got.Secret != rotated.Secret || got.PrevSecret != sub.Secret {
		t.Fatalf("stored secret %q, previous %q: want the rotation's %q, %q (the rekey overwrote it)",
			got.Secret, got.PrevSecret, rotated.Secret, sub.Secret)
	}
}
