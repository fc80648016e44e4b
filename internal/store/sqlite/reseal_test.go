package sqlite

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file written by the release before sealing (schema 0005, secrets and a
// URL's credentials in the clear, mode 0644) is sealed when it is opened:
// the rows and the WAL then hold no plaintext, and after
// SubscriptionVacuum (hookd rekey --vacuum) neither does the file, whose
// free space kept copies SQLite moved while rebalancing pages. All three
// files are 0600.
func TestPlaintextFromThePreviousReleaseIsSealedInTheFile(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "hookd.db")
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("previous-release-secret-0123"))
	prev := "whsec_" + base64.StdEncoding.EncodeToString([]byte("previous-release-prev-4567"))
	w, err := openWriter(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateTo(ctx, w, 5); err != nil {
		t.Fatal(err)
	}
	// Padding so the rows span pages, as on a real file.
	pad := strings.Repeat("x", 3000)
	for _, id := range []string{"sub_1", "sub_2", "sub_3"} {
		if _, err := w.ExecContext(ctx, `INSERT INTO subscriptions (id, tenant_id, url, host, event_types, secret,
			prev_secret, prev_secret_expires_at, state, disabled_reason, created_at, updated_at)
			VALUES (?, 'default', 'https://alice:pa55w0rd-old@h.example/hook', 'h.example:443', '["*"]', ?, ?, 9, 'active', ?, 1, 1)`,
			id, secret, prev, pad); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	needles := []string{secret[6:], prev[6:], "pa55w0rd-old"}
	found := func(files ...string) []string {
		var out []string
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, n := range needles {
				if bytes.Contains(b, []byte(n)) {
					out = append(out, filepath.Base(f)+": "+n)
				}
			}
		}
		return out
	}
	if len(found(path)) == 0 {
		t.Fatal("the previous release's file holds no plaintext: the test proves nothing")
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}

	s, err := Open(ctx, path, testKeys)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := s.SealedAtOpen(); n != 3 {
		t.Errorf("SealedAtOpen = %d, want 3", n)
	}
	rows := dumpRows(t, s.r, `SELECT * FROM subscriptions`)
	for _, n := range needles {
		if strings.Contains(rows, n) {
			t.Errorf("a row still holds %q after Open", n)
		}
	}
	if got := found(path+"-wal", path+"-shm"); len(got) > 0 {
		t.Errorf("plaintext in the WAL after Open: %v", got)
	}
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, want mode 0600", filepath.Base(f), fi.Mode().Perm())
		}
	}
	sub, err := s.SubscriptionGet(ctx, "", "sub_2")
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
	if got := found(path, path+"-wal", path+"-shm"); len(got) > 0 {
		t.Errorf("plaintext in the files after SubscriptionVacuum: %v", got)
	}
	if _, err := s.SubscriptionGet(ctx, "", "sub_3"); err != nil {
		t.Fatalf("after the vacuum: %v", err)
	}
}

// A new file and its -wal and -shm are 0600 whatever the umask.
func TestNewFilesAreOwnerOnly(t *testing.T) {
	old := umask(0)
	defer umask(old)
	path := filepath.Join(t.TempDir(), "hookd.db")
	s, err := Open(t.Context(), path, testKeys)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(f), err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %04o with umask 0, want 0600", filepath.Base(f), fi.Mode().Perm())
		}
	}
}
