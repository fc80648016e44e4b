package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
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
	"hookd/internal/lifecycle"
	"hookd/internal/retention"
	"hookd/internal/send"
	"hookd/internal/shed"
	"hookd/internal/ui"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "serve [flags]", stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "address the API listens on")
	db := fs.String("db", "./hookd.db", "SQLite file path, or postgres:// URL of a database several nodes share (search_path=SCHEMA selects a schema)")
	adminTokenFlag := fs.String("admin-token", "", "bearer token with access to every tenant (generated and printed at start if empty and no --admin-token-file); on the command line other users see it in ps: prefer the file or HOOKD_ADMIN_TOKEN")
	adminTokenFile := fs.String("admin-token-file", "", "file holding the admin token (surrounding whitespace trimmed), instead of --admin-token")
	var allow listFlag
	fs.Var(&allow, "allow-network", "CIDR, or host:port, that deliveries may reach despite the SSRF guard, e.g. 127.0.0.1:9000 for one local receiver (a name is resolved at start and opens those addresses on that port); a CIDR wider than /8 (IPv4) or /32 (IPv6) logs a warning (repeatable)")
	hostConc := fs.Int("host-concurrency", 10, "in-flight attempts allowed per destination host (host:port), shared fairly among the endpoints active on it")
	shutdown := fs.Duration("shutdown-timeout", 30*time.Second, "how long in-flight sends may take to finish on SIGINT/SIGTERM")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	pprofAddr := fs.String("pprof", "", "loopback address to serve the Go profiler on (/debug/pprof/), e.g. 127.0.0.1:6060; empty: off")
	leaseTTL := fs.Duration("lease-ttl", dispatch.DefaultLeaseTTL, "PostgreSQL: how long a node's shard leases last unrenewed (renewed every third of it); a crashed node's destinations move after about this long")
	retain := fs.Duration("retention", 30*24*time.Hour, "how long events, their deliveries and attempts are kept (an event with a pending delivery stays until it is done); daily per-subscription counts are kept forever; 0: keep everything")
	shedAt := fs.Int("shed-backlog", shed.DefaultThreshold, "pending deliveries of one subscription over which, if the backlog has not shrunk for 5 minutes, its new deliveries are written skipped (replayable) until it is back under 80 %; 0: never shed")
	keepSuccess := fs.Bool("keep-success-response", false, "keep a successful (2xx) answer's headers and first KiB of body with its attempt, as a failure's always are; off, a success keeps its status and timing only, which saves a write per delivery")
	disableAfter := fs.Duration("disable-after", lifecycle.DefaultDisableAfter, "disable a subscription every attempt of which has failed for this long, with attempts every day (any success resets the clock); its owner is told by a hookd.subscription.disabled event; 0: never")
	nodeID := fs.String("node-id", "", "PostgreSQL: this node's name in shard_leases (default: hostname and a random suffix)")
	metricsAddr := fs.String("metrics-addr", defaultMetricsAddr, "address serving GET /metrics without credentials, for Prometheus: keep it on loopback or a private network; empty or off: no such listener (the API port answers /metrics to the admin token either way)")
	ingestRate := fs.Float64("ingest-rate", api.DefaultIngestRate, "events per second one tenant may post to this node (each node of several allows it); over it POST /v1/events answers 429 with Retry-After; 0: no limit")
	ingestBurst := fs.Int("ingest-burst", api.DefaultIngestBurst, "events one tenant may post at once above --ingest-rate")
	maxSubs := fs.Int("max-subscriptions", api.DefaultMaxSubscriptions, "live subscriptions one tenant may have; over it POST /v1/subscriptions answers 422; 0: no limit")
	maxConns := fs.Int("max-connections", 0, "API connections open at once, all clients together; past it a new one is closed at once (each holds a file descriptor the deliveries and the store also need); 0: half the process's file limit")
	idle := fs.Duration("idle-timeout", app.DefaultIdleTimeout, "how long an API keep-alive connection may sit idle between requests; keep it longer than a load balancer's idle timeout in front of hookd")
	egressProxy := fs.String("egress-proxy", "", "http://[user:password@]host:port of an HTTP CONNECT proxy (e.g. Smokescreen) every delivery goes through; hookd resolves and checks each endpoint address itself and asks the proxy for that address; empty: direct")
	keyFile := fs.String("secret-key-file", "", secretKeyFileUsage)
	publicURL := fs.String("public-url", "", "URL people reach hookd at (e.g. https://hooks.example.com), for the portal links POST /v1/tenants/{id}/portal-link makes; empty: the host each request named")
	var frames listFlag
	fs.Var(&frames, "frame-ancestors", "origin (https://app.example.com) allowed to show the dashboard in a frame, to embed the customer portal (repeatable); none: no page may frame it")
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
	for _, k := range strayEnv(fs, os.Environ(), "HOOKD_SECRET_KEY") {
		log.Warn("environment variable names no serve flag: ignored", "var", k)
	}
	// An empty --addr would listen on every interface, on a random port.
	if _, _, err := net.SplitHostPort(*addr); err != nil {
		return fmt.Errorf("--addr %q: want host:port, such as 127.0.0.1:8080 (:8080 for every interface)", *addr)
	}
	allowed, err := send.ParseAllow(ctx, net.DefaultResolver, allow)
	if err != nil {
		return err
	}
	var proxy *url.URL
	if *egressProxy != "" {
		if proxy, err = send.ParseProxy(*egressProxy); err != nil {
			return err
		}
	}
	if *hostConc < 1 {
		return fmt.Errorf("--host-concurrency must be at least 1")
	}
	if err := checkPprofAddr(*pprofAddr); err != nil {
		return err
	}
	if *metricsAddr != "" && *metricsAddr != "off" {
		if _, _, err := net.SplitHostPort(*metricsAddr); err != nil {
			return fmt.Errorf("--metrics-addr %q: not a host:port address like 127.0.0.1:9464, or off: %w", *metricsAddr, err)
		}
	}
	if *leaseTTL < 300*time.Millisecond {
		return fmt.Errorf("--lease-ttl must be at least 300ms")
	}
	if *retain != 0 && *retain < retention.Min {
		return fmt.Errorf("--retention must be 0 (keep everything) or at least %s", retention.Min)
	}
	if *disableAfter < 0 {
		return fmt.Errorf("--disable-after must be 0 (never) or positive")
	}
	if *shedAt < 0 {
		return fmt.Errorf("--shed-backlog must be 0 (never shed) or positive")
	}
	if !(*ingestRate >= 0) || math.IsInf(*ingestRate, 1) { // NaN compares false, and read as no limit
		return fmt.Errorf("--ingest-rate must be 0 (no limit) or a positive number")
	}
	if *shutdown <= 0 {
		return fmt.Errorf("--shutdown-timeout must be positive")
	}
	if *ingestBurst < 1 {
		return fmt.Errorf("--ingest-burst must be at least 1")
	}
	if *maxSubs < 0 {
		return fmt.Errorf("--max-subscriptions must be 0 (no limit) or positive")
	}
	if *idle <= 0 {
		return fmt.Errorf("--idle-timeout must be positive")
	}
	if *maxConns < 0 {
		return fmt.Errorf("--max-connections must be 0 (half the file limit) or positive")
	}
	if *publicURL != "" {
		if u, err := url.Parse(*publicURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" ||
			u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return fmt.Errorf("--public-url %q: want an http(s) URL like https://hooks.example.com", *publicURL)
		}
	}
	var frameAncestors []string
	for _, f := range frames {
		o, err := ui.ParseOrigin(f)
		if err != nil {
			return fmt.Errorf("--frame-ancestors: %w", err)
		}
		frameAncestors = append(frameAncestors, o)
	}
	token, err := adminToken(fs, *adminTokenFlag, *adminTokenFile, log)
	if err != nil {
		return err
	}
	if token == "" {
		token = api.NewToken("adm_")
		fmt.Fprintf(stderr, "admin token (generated for this run; set --admin-token-file or HOOKD_ADMIN_TOKEN to keep one): %s\n", token)
	}

	keys, err := app.SecretKeys(*db, *keyFile, os.Getenv("HOOKD_SECRET_KEY"), log)
	if err != nil {
		return err
	}

	a, err := app.Open(ctx, app.Config{
		DB: *db, AdminToken: token, AllowNetworks: allowed.Networks, AllowAddrs: allowed.Addrs, EgressProxy: proxy,
		HostConcurrency: *hostConc, Version: version, Log: log,
		Node: *nodeID, LeaseTTL: *leaseTTL, Retention: *retain,
		PublicURL: *publicURL, FrameAncestors: frameAncestors,
		Shed: shed.Config{Threshold: *shedAt}, Keys: keys, DisableAfter: *disableAfter, KeepSuccessResponse: *keepSuccess,
		HTTP: app.HTTPTimeouts{Idle: *idle}, MaxConns: *maxConns,
		Limits: api.Limits{IngestRate: *ingestRate, IngestBurst: *ingestBurst, MaxSubscriptions: *maxSubs},
	})
	if err != nil {
		return err
	}
	ln, err := a.Listen("tcp", *addr)
	if err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), *shutdown)
		defer cancel()
		a.Shutdown(sctx)
		return fmt.Errorf("--addr: %w", err)
	}
	fmt.Fprintf(stdout, "hookd %s listening on http://%s (db %s)\n", version, ln.Addr(), redactDB(*db))
	if *pprofAddr != "" {
		srv, pln, err := servePprof(*pprofAddr, a.Listen)
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

	if *metricsAddr != "" && *metricsAddr != "off" {
		srv, mln, err := serveMetrics(*metricsAddr, a.MetricsHandler(), a.Listen)
		if err != nil {
			ln.Close()
			sctx, cancel := context.WithTimeout(context.Background(), *shutdown)
			defer cancel()
			a.Shutdown(sctx)
			return err
		}
		defer srv.Close()
		fmt.Fprintf(stdout, "metrics on http://%s/metrics\n", mln.Addr())
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

// defaultMetricsAddr is loopback, so metrics leave the machine only when
// the operator says where; not 9090, which Prometheus itself takes.
const defaultMetricsAddr = "127.0.0.1:9464"

// serveMetrics serves GET /metrics (h) on addr, a listener of its own:
// the API port answers it only to the admin token. listen is the node's,
// so deliveries never reach it.
func serveMetrics(addr string, h http.Handler, listen func(network, addr string) (net.Listener, error)) (*http.Server, net.Listener, error) {
	ln, err := listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics-addr: %w (give another address, or off for none)", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: app.MaxHeaderBytes}
	go srv.Serve(ln)
	return srv, ln, nil
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

// servePprof serves the Go profiler on addr, which must be loopback,
// through listen (hookd's, so deliveries never reach it). The handlers are
// mounted on their own mux, never on the API's.
func servePprof(addr string, listen func(network, addr string) (net.Listener, error)) (*http.Server, net.Listener, error) {
	if err := checkPprofAddr(addr); err != nil {
		return nil, nil, err
	}
	ln, err := listen("tcp", addr)
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
