package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"hookd/internal/seal"
	"hookd/internal/store/sqlite"
)

// SecretKeys finds the keyring subscriptions' secrets and headers are
// sealed with, from the first of these that is set:
//   - keyFile (--secret-key-file): a file of keys, one per line, the first
//     sealing (seal.Parse);
//   - envKeys (HOOKD_SECRET_KEY): the keys themselves, comma-separated;
//   - on SQLite, the file <db>.key next to the database, generated (mode
//     0600) when missing, which is logged.
//
// PostgreSQL needs one of the first two: every node must hold the same keys.
// Errors name where the keys came from, never a key.
func SecretKeys(db, keyFile, envKeys string, log *slog.Logger) (*seal.Keyring, error) {
	switch {
	case keyFile != "" && envKeys != "":
		return nil, errors.New("--secret-key-file (HOOKD_SECRET_KEY_FILE) and HOOKD_SECRET_KEY are both set: set one")
	case keyFile != "":
		return readKeyFile(keyFile, "--secret-key-file "+keyFile, log)
	case envKeys != "":
		k, err := seal.Parse(envKeys)
		if err != nil {
			return nil, fmt.Errorf("HOOKD_SECRET_KEY: %w", err)
		}
		return k, nil
	case isPostgres(db):
		return nil, errors.New("PostgreSQL needs a secret key that every node shares: set --secret-key-file (or HOOKD_SECRET_KEY_FILE) or HOOKD_SECRET_KEY; make one with: openssl rand -base64 32")
	}
	path := db + ".key"
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		// A database whose secrets are sealed already lost its key file: a
		// new key would not open them, and left beside it would be taken
		// for the right one at every later start.
		if fi, err := os.Stat(db); err == nil && fi.Size() > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			id, err := sqlite.SealedUnder(ctx, db)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", db, err)
			}
			if id != "" {
				return nil, fmt.Errorf("secret key file %s is missing, and %s holds secrets sealed under key %s: restore the key file backed up with the database, or name it with --secret-key-file (a new key cannot open them)", path, db, id)
			}
		}
		if err := writeKeyFile(path, db); err != nil {
			return nil, err
		}
		log.Warn("generated a secret key file for the database: back it up with the database, as without it the secrets in the database cannot be read",
			"key_file", path, "db", db)
	}
	return readKeyFile(path, "secret key file "+path, log)
}

// readKeyFile parses the keys in path; what names them in errors.
func readKeyFile(path, what string, log *slog.Logger) (*seal.Keyring, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		log.Warn("the secret key file can be read by other users of this machine: chmod 600 it", "key_file", path, "mode", fmt.Sprintf("%04o", fi.Mode().Perm()))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	k, err := seal.Parse(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return k, nil
}

// writeKeyFile makes a key file at path holding one new key, mode 0600,
// all at once: written beside it, synced, then linked into place, which
// fails if another process made one meanwhile (that one is then used).
func writeKeyFile(path, db string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("creating secret key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	text := "# hookd's secret key for " + db + ". Back it up with the database: without it\n" +
		"# the secrets in the database cannot be read. The first key seals, any key\n" +
		"# opens; to change keys see docs/operations.md (hookd rekey).\n" + seal.NewKey() + "\n"
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("creating secret key file: %w", err)
	}
	_, err = tmp.WriteString(text)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing secret key file: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating secret key file %s: %w", path, err)
	}
	// The name must outlive a crash too: secrets are sealed with it next.
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("syncing secret key file: %w", err)
	}
	defer dir.Close()
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("syncing secret key file: %w", err)
	}
	return nil
}

// isPostgres reports whether a --db value names a PostgreSQL database.
func isPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}
