package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"hookd/internal/app"
	"hookd/internal/seal"
	"hookd/internal/store"
)

// runRekey seals every subscription's secrets and headers under the first
// key of the keyring, so the other keys can then be dropped.
func runRekey(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rekey", "rekey [flags]\n\nSeals every subscription's secrets and endpoint headers under the first secret key, so\nthe other keys can then be removed. Safe while nodes run: put the new key first on every\nnode, then rekey, then drop the old key (docs/operations.md). Running it again changes nothing", stderr)
	db := fs.String("db", "./hookd.db", "SQLite file path, or postgres:// URL (search_path=SCHEMA selects a schema)")
	keyFile := fs.String("secret-key-file", "", secretKeyFileUsage)
	batch := fs.Int("batch", 500, "subscriptions resealed per transaction (1 to 10000)")
	vacuum := fs.Bool("vacuum", false, "afterwards rewrite the storage so no old copy (plaintext from an older release, or a value under a retired key) stays in free space: "+
		"SQLite runs VACUUM on the whole file (stop hookd serve first; needs free disk about the file's size), PostgreSQL VACUUM FULL on subscriptions (locks the table while it runs)")
	if err := parseFlags(fs, args, os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *batch < 1 || *batch > 10000 {
		return fmt.Errorf("--batch must be from 1 to 10000")
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	keys, err := existingKeys(*db, *keyFile, log)
	if err != nil {
		return err
	}
	ids := keys.IDs()
	fmt.Fprintf(stdout, "rekey %s: sealing under key %s (opening with %s)\n", redactDB(*db), ids[0], strings.Join(ids, ", "))
	st, err := app.OpenStore(ctx, *db, keys)
	if err != nil {
		return err
	}
	defer st.Close()
	if s, ok := st.(interface{ SealedAtOpen() int }); ok && s.SealedAtOpen() > 0 {
		fmt.Fprintf(stdout, "sealed %d subscriptions an older release stored in the clear\n", s.SealedAtOpen())
	}
	n, err := rekeyAll(ctx, st, *batch)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "resealed %d subscriptions under key %s\n", n, ids[0])
	// A node whose first key is another one seals what it writes under that
	// key: a second walk finds it. The order in docs/operations.md avoids it.
	again, err := rekeyAll(ctx, st, *batch)
	if err != nil {
		return err
	}
	if again > 0 {
		fmt.Fprintf(stdout, "warning: %d subscriptions were written meanwhile under another key (resealed now): a node still seals with another first key; put key %s first on every node, then run rekey again\n", again, ids[0])
	}
	if *vacuum {
		if err := st.SubscriptionVacuum(ctx); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "vacuumed: the subscriptions' storage was written anew")
	}
	return nil
}

// existingKeys is the keyring of the database at db for a command that
// works on one that exists (rekey, purge): a SQLite file that is not there,
// or has no key to open it, is refused, where opening would create the
// file, or a new key beside it.
func existingKeys(db, keyFile string, log *slog.Logger) (*seal.Keyring, error) {
	if !strings.HasPrefix(db, "postgres://") && !strings.HasPrefix(db, "postgresql://") {
		if _, err := os.Stat(db); err != nil {
			return nil, fmt.Errorf("--db %s: %w", db, err)
		}
		if keyFile == "" && os.Getenv("HOOKD_SECRET_KEY") == "" {
			if _, err := os.Stat(db + ".key"); errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("no secret key: set --secret-key-file or HOOKD_SECRET_KEY (the default %s.key does not exist)", db)
			}
		}
	}
	return app.SecretKeys(db, keyFile, os.Getenv("HOOKD_SECRET_KEY"), log)
}

// rekeyAll walks every subscription in batches and returns how many it resealed.
func rekeyAll(ctx context.Context, st store.Store, batch int) (int, error) {
	p := store.ResealParams{All: true, Limit: batch}
	total := 0
	for {
		res, err := st.SubscriptionReseal(ctx, p)
		if err != nil {
			return total, err
		}
		total += res.Changed
		if res.Looked < p.Limit {
			return total, nil
		}
		p.After = res.Next
	}
}
