package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"hookd/internal/api"
	"hookd/internal/app"
	"hookd/internal/dispatch"
	"hookd/internal/shed"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "serve [flags]", stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "address the API listens on")
	db := fs.String("db", "./hookd.db", "SQLite file path, or postgres:// URL of a database several nodes share (search_path=SCHEMA selects a schema)")
	adminToken := fs.String("admin-token", "", "bearer token with access to every tenant (generated and printed at start if empty)")
	var allow listFlag
	fs.Var(&allow, "allow-network", "CIDR that deliveries may reach despite the SSRF guard, e.g. 127.0.0.0/8 for local development (repeatable)")
	hostConc := fs.Int("host-concurrency", 10, "in-flight attempts allowed per destination host (host:port), shared fairly among the endpoints active on it")
	shutdown := fs.Duration("shutdown-timeout", 30*time.Second, "how long in-flight sends may take to finish on SIGINT/SIGTERM")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	pprofAddr := fs.String("pprof", "", "loopback address to serve the Go profiler on (/debug/pprof/), e.g. 127.0.0.1:6060; empty: off")
	leaseTTL := fs.Duration("lease-ttl", dispatch.DefaultLeaseTTL, "PostgreSQL: how long a node's shard leases last unrenewed (renewed every third of it); a crashed node's destinations move after about this long")
	retain := fs.Duration("retention", 30*24*time.Hour, "how long events, their deliveries and attempts are kept (an event with a pending delivery stays until it is done); daily per-subscription counts are kept forever; 0: keep everything")
	shedAt := fs.Int("shed-backlog", shed.DefaultThreshold, "pending deliveries of one subscription over which, if the backlog has not shrunk for 5 minutes, its new deliveries are written skipped (replayable) until it is back under 80 %; 0: never shed")
	nodeID := fs.String("node-id", "", "PostgreSQL: this node's name in shard_leases (default: hostname and a random suffix)")
	keyFile := fs.String("secret-key-file", "", secretKeyFileUsage)
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
	if err := checkPprofAddr(*pprofAddr); err != nil {
		return err
	}
	if *leaseTTL < 300*time.Millisecond {
		return fmt.Errorf("--lease-ttl must be at least 300ms")
	}
	if *retain < 0 {
		return fmt.Errorf("--retention must be 0 (keep everything) or positive")
	}
	if *shedAt < 0 {
		return fmt.Errorf("--shed-backlog must be 0 (never shed) or positive")
	}
	if *adminToken == "" {
		*adminToken = api.NewToken("adm_")
		fmt.Fprintf(stderr, "admin token (generated for this run; set --admin-token or HOOKD_ADMIN_TOKEN to keep one): %s\n", *adminToken)
	}

	keys, err := app.SecretKeys(*db, *keyFile, os.Getenv("HOOKD_SECRET_KEY"), log)
	if err != nil {
		return err
	}

	a, err := app.Open(ctx, app.Config{
		DB: *db, AdminToken: *adminToken, AllowNetworks: prefixes,
		HostConcurrency: *hostConc, Version: version, Log: log,
		Node: *nodeID, LeaseTTL: *leaseTTL, Retention: *retain,
		Shed: shed.Config{Threshold: *shedAt}, Keys: keys,
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
	fmt.Fprintf(stdout, "hookd %s listening on http://%s (db %s)\n", version, ln.Addr(), redactDB(*db))
	if *pprofAddr != "" {
		srv, pln, err := servePprof(*pprofAddr)
		if err != nil {
			ln.Close()
			sctx, cancel := context.WithTimeout(context.Background(), *shutdown)
			defer cancel()
			a.Shutdown(sctx)
			return err
		}
		defer srv.Close()
		fmt.Fprintf(stdout, "profiler on http://%s/debug/pprof/\n", pln.Addr())
	}

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

// secretKeyFileUsage is --secret-key-file's help, shared by serve and rekey.
const secretKeyFileUsage = "file of the keys sealing secrets at rest: each the base64 of 32 random bytes (openssl rand -base64 32), one per line, the first sealing, the others only opening. " +
	"Or HOOKD_SECRET_KEY holds the keys themselves, comma-separated (no flag for it, so they never show in ps). " +
	"Default on SQLite: <db>.key, generated at first start (back it up with the database); PostgreSQL needs one, the same on every node"

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", "migrate [flags]", stderr)
	db := fs.String("db", "./hookd.db", "SQLite file path, or postgres:// URL (search_path=SCHEMA selects a schema)")
	if err := parseFlags(fs, args, os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := app.Migrate(ctx, *db); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "migrated %s\n", redactDB(*db))
	return nil
}

// redactDB is a --db value fit to print: a database URL loses its
// password, whether in the user part or in a password parameter.
func redactDB(db string) string {
	if !strings.HasPrefix(db, "postgres://") && !strings.HasPrefix(db, "postgresql://") {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		return "(unparsable database URL)"
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// checkPprofAddr accepts only a loopback address for --pprof: profiles and
// the command line leak internals (paths, tokens in flags, memory contents),
// so they are never served beyond this machine. The host must be a loopback
// IP or "localhost"; an empty host would listen on every interface.
func checkPprofAddr(addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--pprof %q: not a host:port address like 127.0.0.1:6060: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Unmap().IsLoopback() {
		return fmt.Errorf("--pprof %q: must be a loopback address such as 127.0.0.1:6060 or [::1]:6060 (the profiler exposes process internals and has no authentication)", addr)
	}
	return nil
}

// servePprof serves the Go profiler on addr, which must be loopback. The
// handlers are mounted on their own mux, never on the API's.
func servePprof(addr string) (*http.Server, net.Listener, error) {
	if err := checkPprofAddr(addr); err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--pprof: %w", err)
	}
	// "localhost" is resolved by the system: check what was actually bound.
	if ap, err := netip.ParseAddrPort(ln.Addr().String()); err != nil || !ap.Addr().Unmap().IsLoopback() {
		ln.Close()
		return nil, nil, fmt.Errorf("--pprof %q: bound %s, which is not loopback", addr, ln.Addr())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return srv, ln, nil
}
