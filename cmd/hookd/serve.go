package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"time"

	"hookd/internal/api"
	"hookd/internal/app"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "serve [flags]", stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "address the API listens on")
	db := fs.String("db", "./hookd.db", "SQLite file path")
	adminToken := fs.String("admin-token", "", "bearer token with access to every tenant (generated and printed at start if empty)")
	var allow listFlag
	fs.Var(&allow, "allow-network", "CIDR that deliveries may reach despite the SSRF guard, e.g. 127.0.0.0/8 for local development (repeatable)")
	hostConc := fs.Int("host-concurrency", 10, "in-flight attempts allowed per destination host")
	shutdown := fs.Duration("shutdown-timeout", 30*time.Second, "how long in-flight sends may take to finish on SIGINT/SIGTERM")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := parseFlags(fs, args, os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	prefixes := make([]netip.Prefix, 0, len(allow))
	for _, c := range allow {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("--allow-network %q: not a CIDR like 127.0.0.0/8", c)
		}
		prefixes = append(prefixes, p.Masked())
	}
	if *hostConc < 1 {
		return fmt.Errorf("--host-concurrency must be at least 1")
	}
	if *adminToken == "" {
		*adminToken = "adm_" + api.NewAPIKey()[3:]
		fmt.Fprintf(stderr, "admin token (generated for this run; set --admin-token or HOOKD_ADMIN_TOKEN to keep one): %s\n", *adminToken)
	}

	a, err := app.Open(ctx, app.Config{
		DB: *db, AdminToken: *adminToken, AllowNetworks: prefixes,
		HostConcurrency: *hostConc, Version: version, Log: log,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), *shutdown)
		defer cancel()
		a.Shutdown(sctx)
		return fmt.Errorf("--addr: %w", err)
	}
	fmt.Fprintf(stdout, "hookd %s listening on http://%s (db %s)\n", version, ln.Addr(), *db)

	served := make(chan error, 1)
	go func() { served <- a.Serve(ln) }()
	select {
	case err = <-served:
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", *shutdown)
	sctx, cancel := context.WithTimeout(context.Background(), *shutdown)
	defer cancel()
	return errors.Join(err, a.Shutdown(sctx))
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", "migrate [flags]", stderr)
	db := fs.String("db", "./hookd.db", "SQLite file path")
	if err := parseFlags(fs, args, os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	st, err := app.OpenStore(ctx, *db)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "migrated %s\n", *db)
	return st.Close()
}
