package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"hookd/internal/app"
	"hookd/internal/retention"
)

// runPurge runs one retention pass now, as serve does at start and hourly:
// an operator can run the first one on a large database at a quiet hour.
func runPurge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("purge", "purge --retention D [flags]\n\nRemoves now what one retention pass would (events, deliveries and attempts older\nthan --retention and not pending, their counts kept), then exits. On PostgreSQL it may\nrun beside serving nodes; stop hookd serve first on SQLite", stderr)
	db := fs.String("db", "./hookd.db", "SQLite file path, or postgres:// URL (search_path=SCHEMA selects a schema)")
	keyFile := fs.String("secret-key-file", "", secretKeyFileUsage)
	keep := fs.Duration("retention", 0, "remove what is older than this (required, > 0)")
	if err := parseFlags(fs, args, os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *keep < retention.Min {
		return fmt.Errorf("--retention must be at least %s (e.g. 720h)", retention.Min)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	keys, err := existingKeys(*db, *keyFile, log)
	if err != nil {
		return err
	}
	st, err := app.OpenStore(ctx, *db, keys)
	if err != nil {
		return err
	}
	defer st.Close()
	start := time.Now()
	n, err := retention.Pass(ctx, st, *keep, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "removed %d events older than %s in %s\n", n, start.Add(-*keep).UTC().Format(time.RFC3339),
		time.Since(start).Round(time.Millisecond))
	return nil
}
