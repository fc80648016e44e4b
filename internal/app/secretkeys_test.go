package app

import (
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/seal"
	"hookd/internal/store/sqlite"
)

func TestSecretKeys(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	k1, k2 := seal.NewKey(), seal.NewKey()
	dir := t.TempDir()
	file := filepath.Join(dir, "keys")
	if err := os.WriteFile(file, []byte("# new first\n"+k2+"\n"+k1+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want, _ := seal.Parse(k2 + "," + k1)

	got, err := SecretKeys("./hookd.db", file, "", quiet)
	if err != nil || strings.Join(got.IDs(), ",") != strings.Join(want.IDs(), ",") {
		t.Fatalf("from a file: %v, %v; want keys %v", got, err, want.IDs())
	}
	got, err = SecretKeys("postgres://db/hookd", "", k2+", "+k1, quiet)
	if err != nil || strings.Join(got.IDs(), ",") != strings.Join(want.IDs(), ",") {
		t.Fatalf("from HOOKD_SECRET_KEY: %v, %v", got, err)
	}

	for _, c := range []struct {
		name, db, file, env, says string
	}{
		{"both", "./hookd.db", file, k1, "both"},
		{"postgres without a key", "postgres://db/hookd", "", "", "--secret-key-file"},
		{"bad env", "./hookd.db", "", k1 + ",short", "HOOKD_SECRET_KEY: key 2"},
		{"missing file", "./hookd.db", filepath.Join(dir, "nope"), "", "--secret-key-file"},
	} {
		_, err := SecretKeys(c.db, c.file, c.env, quiet)
		if err == nil || !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), k1) {
			t.Errorf("%s: %v, want an error saying %q (and no key)", c.name, err, c.says)
		}
	}
}

// On SQLite with no key given, a key file is made next to the database,
// 0600, logged once; later starts use it without a word.
func TestSecretKeysGeneratesAKeyFileForSQLite(t *testing.T) {
	t.Parallel()
	var log logBuffer
	db := filepath.Join(t.TempDir(), "hookd.db")
	first, err := SecretKeys(db, "", "", slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(db + ".key")
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	if n := strings.Count(log.String(), "generated a secret key file"); n != 1 || !strings.Contains(log.String(), db+".key") {
		t.Fatalf("want one log line naming the key file, got:\n%s", log.String())
	}
	again, err := SecretKeys(db, "", "", slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil || again.IDs()[0] != first.IDs()[0] {
		t.Fatalf("second start: %v, %v; want the same key", again, err)
	}
	if n := strings.Count(log.String(), "generated"); n != 1 {
		t.Errorf("the second start logged a generation too:\n%s", log.String())
	}

	// A key file others can read works, with a warning.
	os.Chmod(db+".key", 0o644)
	if _, err := SecretKeys(db, "", "", slog.New(slog.NewTextHandler(&log, nil))); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "can be read by other users") {
		t.Errorf("no warning for a key file mode 0644:\n%s", log.String())
	}
}

// A database whose secrets are sealed, its key file gone (moved without
// it, or deleted): no new key is made beside it, which would open nothing
// and pass for the right one at every later start; the error says to
// restore it. With no sealed secret yet, a new key is fine.
func TestSecretKeysRefusesANewKeyForASealedDatabase(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	db := filepath.Join(t.TempDir(), "hookd.db")
	keys, err := SecretKeys(db, "", "", quiet)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(t.Context(), db, keys)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(db + ".key")
	// Subscriptions' table, none in it: a new key may be made.
	if _, err := SecretKeys(db, "", "", quiet); err != nil {
		t.Fatalf("a database with no sealed secret: %v, want a new key file", err)
	}
	os.Remove(db + ".key")
	now := time.Now().UTC()
	sub := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: "https://example.com/h", Host: "example.com:443",
		EventTypes: []string{"*"}, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", State: core.SubActive, CreatedAt: now, UpdatedAt: now}
	if err := st.SubscriptionCreate(t.Context(), sub); err != nil {
		t.Fatal(err)
	}
	st.Close()
	_, err = SecretKeys(db, "", "", quiet)
	if err == nil || !strings.Contains(err.Error(), "restore") || !strings.Contains(err.Error(), keys.IDs()[0]) {
		t.Fatalf("a sealed database without its key file: %v, want an error naming key %s and saying to restore it", err, keys.IDs()[0])
	}
	if _, err := os.Stat(db + ".key"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a key file was made beside the sealed database (stat: %v)", err)
	}
}
