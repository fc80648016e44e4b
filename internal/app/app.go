// Package app wires hookd's parts into one running node: store, subscription
// registry, ingest, dispatcher and API. `hookd serve` and the benchmarks both
// start hookd through it.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"hookd/internal/api"
	"hookd/internal/core"
	"hookd/internal/dispatch"
	"hookd/internal/ingest"
	"hookd/internal/lifecycle"
	"hookd/internal/metrics"
	"hookd/internal/outage"
	"hookd/internal/replay"
	"hookd/internal/retention"
	"hookd/internal/seal"
	"hookd/internal/send"
	"hookd/internal/shed"
	"hookd/internal/store"
	"hookd/internal/store/postgres"
	"hookd/internal/store/sqlite"
	"hookd/internal/subs"
	"hookd/internal/ui"
)

type Config struct {
	// DB is a SQLite file path, or a postgres:// URL naming a database
	// several nodes share (see OpenStore).
	DB              string
	AdminToken      string
	AllowNetworks   []netip.Prefix
	HostConcurrency int
	Version         string
	Log             *slog.Logger
	// Node and LeaseTTL name this node and set its shard lease TTL on a
	// store several nodes share (see dispatch.Config); SQLite ignores them.
	Node     string
	LeaseTTL time.Duration
	// Retention is how long events, deliveries and attempts are kept
	// (see retention); 0 keeps everything.
	Retention time.Duration
	// Shed configures shedding at ingest (see shed); Threshold 0 turns it off.
	Shed shed.Config
	// DisableAfter disables a subscription every attempt of which failed
	// for that long, with attempts every day (see lifecycle); 0 never.
	DisableAfter time.Duration
	// KeepSuccessResponse keeps a 2xx answer's headers and body head with
	// its attempt (send.Config.KeepSuccessResponse).
	KeepSuccessResponse bool
	// HTTP bounds what one client may hold of the API server.
	HTTP HTTPTimeouts
	// MaxConns is how many connections the API's clients may hold open
	// together (see connLimit); 0: DefaultMaxConns.
	MaxConns int
	// Limits bound what one tenant may ask (zero: no limit; hookd serve
	// starts with api's defaults).
	Limits api.Limits
	// Outage sets how the store's health is followed (zero: defaults);
	// its Log is Log.
	Outage outage.Config

	// AllowAddrs opens one address on one port each past the SSRF guard
	// (--allow-network host:port, names resolved by send.ParseAllow).
	AllowAddrs []netip.AddrPort
	// EgressProxy, if set, is the HTTP CONNECT proxy every delivery goes
	// through (--egress-proxy; see send.Config.Proxy).
	EgressProxy *url.URL
	// Keys seal subscriptions' secrets and headers at rest (nil: on SQLite
	// the key file next to the database, see SecretKeys; PostgreSQL
	// refuses to start).
	Keys *seal.Keyring
	// PublicURL is where people reach the dashboard, for portal links
	// ("": the host each request named).
	PublicURL string
	// FrameAncestors are the origins that may show the dashboard in a
	// frame (a platform embedding its customer portal); none by default.
	FrameAncestors []string
}

type App struct {
	cfg      Config
	store    store.Store
	subs     *subs.Registry
	subsvc   *subs.Service // every subscription change goes through it
	dispatch *dispatch.Dispatcher
	ingest   *ingest.Ingester
	replays  *replay.Runner
	purger   *retention.Purger // nil when everything is kept
	shed     *shed.Shedder
	life     *lifecycle.Lifecycle
	cluster  *cluster // nil on a store one node holds (SQLite)
	keys     *api.KeyCache
	http     *http.Server
	maxConns int
	metrics  *metrics.Metrics
	outage   *outage.Tracker // whether the store commits: /readyz, and its outages' log
	stopping atomic.Bool
	// guard also refuses this node's own listeners (Listen, Serve).
	guard *send.Guard
	lock  *os.File // a SQLite database's node lock, released at Shutdown
}

// OpenStore opens the store a --db value names, running migrations: a
// postgres:// or postgresql:// URL is a PostgreSQL database several nodes
// can share, anything else a SQLite file path. keys seal and open
// subscriptions' secrets and headers.
func OpenStore(ctx context.Context, db string, keys *seal.Keyring) (store.Store, error) {
	if strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") {
		return postgres.Open(ctx, db, keys)
	}
	return sqlite.Open(ctx, db, keys)
}

// Migrate creates or upgrades the schema of the store a --db value names
// and nothing else: it needs no keys.
func Migrate(ctx context.Context, db string) error {
	if isPostgres(db) {
		return postgres.Migrate(ctx, db)
	}
	return sqlite.Migrate(ctx, db)
}

// Open starts every part but the HTTP listener.
func Open(ctx context.Context, cfg Config) (*App, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Keys == nil {
		k, err := SecretKeys(cfg.DB, "", "", cfg.Log)
		if err != nil {
			return nil, err
		}
		cfg.Keys = k
	}
	cfg.Log.Info("secrets sealed at rest", "sealing_key", cfg.Keys.IDs()[0], "keys", strings.Join(cfg.Keys.IDs(), ","))
	// Locked before the store opens: a second node must not even migrate
	// or reseal what the first one serves.
	var lock *os.File // held for the node's life: see sqlite.LockNode
	if !isPostgres(cfg.DB) {
		var err error
		if lock, err = sqlite.LockNode(cfg.DB); err != nil {
			return nil, err
		}
	}
	opened := false
	defer func() {
		if !opened && lock != nil {
			lock.Close()
		}
	}()
	st, err := OpenStore(ctx, cfg.DB, cfg.Keys)
	if err != nil {
		return nil, err
	}
	if s, ok := st.(interface{ SealedAtOpen() int }); ok && s.SealedAtOpen() > 0 {
		cfg.Log.Warn("sealed the secrets an older release stored in the clear; copies may remain in the database's free space and in its backups: run hookd rekey --vacuum, and rotate those secrets if a copy may have leaked",
			"subscriptions", s.SealedAtOpen())
	}
	all, err := st.SubscriptionListAll(ctx)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("loading subscriptions: %w", err)
	}
	reg := subs.New(all)
	guard := send.NewGuard(cfg.AllowNetworks, cfg.AllowAddrs...)
	if len(cfg.AllowNetworks) > 0 || len(cfg.AllowAddrs) > 0 {
		cfg.Log.Info("SSRF guard opened by --allow-network", "networks", cfg.AllowNetworks, "addresses", cfg.AllowAddrs)
	}
	for _, p := range (send.Allow{Networks: cfg.AllowNetworks}).Wide() {
		cfg.Log.Warn("--allow-network opens a range wider than a /8 (IPv4) or /32 (IPv6): every tenant's endpoints may reach any address in it, internal services and cloud metadata included; open single host:port addresses instead", "cidr", p)
	}
	if cfg.EgressProxy != nil {
		cfg.Log.Info("deliveries go through an egress proxy", "proxy", cfg.EgressProxy.Redacted())
	}
	// Each node has its own registry: several nodes in one process (tests,
	// benchmarks) never collide.
	a := &App{cfg: cfg, store: st, subs: reg, metrics: metrics.New(), guard: guard}
	// Built before the dispatcher it wakes: nothing changes until Open returns.
	a.subsvc = subs.NewService(st, reg, func(host, subID string) { a.dispatch.Wake(host, subID) })
	// A store that leases shards or notifies is shared with other nodes.
	_, leases := st.(store.Leaser)
	_, notifies := st.(store.Notifier)
	shared := leases || notifies
	var resync time.Duration // the dispatcher's default
	if shared {
		resync = sharedResync
	}
	// One tracker for the node: the API and every background task report
	// their failed store calls to it, so an outage is logged once, and
	// /readyz follows writes the node is not making too.
	outCfg := cfg.Outage
	outCfg.Log = cfg.Log
	a.outage = outage.New(outCfg, st)
	a.outage.Start()
	a.dispatch = dispatch.New(dispatch.Config{
		Store: st, Subs: reg, Log: cfg.Log, Outage: a.outage,
		Sender: send.New(send.Config{Guard: guard, UserAgent: "hookd/" + cfg.Version, Proxy: cfg.EgressProxy,
			KeepSuccessResponse: cfg.KeepSuccessResponse}),
		HostConcurrency: cfg.HostConcurrency,
		Metrics:         a.metrics,
		Resync:          resync,
		Node:            cfg.Node,
		LeaseTTL:        cfg.LeaseTTL,
		// The lifecycle is made below, before the dispatcher starts.
		Disable: func(ctx context.Context, id, reason string) error { return a.life.Disable(ctx, id, reason) },
		Failing: func(ctx context.Context, f dispatch.Failure) { a.life.Failing(ctx, lifecycle.Failure(f)) },
	})
	a.metrics.WatchDispatcher(func() metrics.DispatchStats { return metrics.DispatchStats(a.dispatch.Stats()) })
	shedCfg := cfg.Shed
	shedCfg.Log, shedCfg.Outage = cfg.Log, a.outage
	shedCfg.Changed = func(ctx context.Context, c shed.Change) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		a.life.Shed(ctx, c, shedCfg.Threshold)
	}
	a.shed = shed.New(shedCfg)
	a.ingest = ingest.New(st, reg, a.dispatch.Notify, ingest.WithMetrics(a.metrics), ingest.WithShedder(a.shed),
		ingest.WithReservations(a.dispatch.Reserve, a.dispatch.Release))
	a.life = lifecycle.New(lifecycle.Config{Store: st, Subs: a.subsvc, Ingest: a.ingest, Log: cfg.Log, Outage: a.outage,
		Owns:         func(host string) bool { return a.dispatch.OwnsShard(core.ShardOf(host)) },
		DisableAfter: cfg.DisableAfter,
		Shedding: func(id string) bool {
			_, on := a.shed.Shedding(id)
			return on
		}})
	if err := a.dispatch.Start(ctx); err != nil {
		a.ingest.Close()
		a.outage.Stop()
		st.Close()
		return nil, fmt.Errorf("starting dispatcher: %w", err)
	}
	a.life.Start()
	a.keys = api.NewKeyCache(st, cfg.Log)
	a.keys.Outage = a.outage
	a.keys.Start()
	if shared {
		a.cluster = startCluster(st, a.subsvc, a.dispatch, cfg.Log, a.outage, a.keys)
	}
	a.shed.Start(st, func(id string) bool {
		sub, ok := reg.Get(id)
		return ok && sub.State == core.SubActive
	})
	a.metrics.WatchShed(a.shed.Count)
	a.replays = replay.New(st, reg, a.dispatch, cfg.Log)
	a.replays.Outage = a.outage
	a.replays.Completed = func(j core.ReplayJob) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a.life.ReplayCompleted(ctx, j)
	}
	a.replays.Start()
	if cfg.Retention > 0 {
		a.purger = retention.Start(st, cfg.Retention, cfg.Log, a.outage)
	}
	handler := api.New(api.Config{
		Store: st, Subs: a.subsvc, Ingest: a.ingest, Dispatch: a.dispatch, Replays: a.replays, Guard: guard,
		AdminToken: cfg.AdminToken, Version: cfg.Version, Log: cfg.Log, Metrics: a.metrics, Shed: a.shed, Keys: a.keys,
		Limits: cfg.Limits, Outage: a.outage, PublicURL: cfg.PublicURL,
		Ready: func() error {
			if a.stopping.Load() {
				return errors.New("shutting down")
			}
			return a.outage.Err()
		},
	})
	// The dashboard is static files calling /v1 from the browser; / leads to it.
	root := http.NewServeMux()
	root.Handle("/", handler)
	root.Handle("GET /ui/", ui.Handler(cfg.FrameAncestors))
	root.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	a.http = cfg.HTTP.server(api.Wrap(cfg.Log, root), cfg.Log)
	a.maxConns = cfg.MaxConns
	if a.maxConns <= 0 {
		a.maxConns = DefaultMaxConns()
	}
	a.lock, opened = lock, true
	return a, nil
}

// Listen opens one of this node's own listeners (the API's, the
// profiler's): deliveries are refused to it whatever --allow-network opens.
// A literal address is refused before it is bound, so no delivery dialled
// meanwhile reaches it; the address bound (a name's, port 0's) after.
func (a *App) Listen(network, addr string) (net.Listener, error) {
	if host, port, err := net.SplitHostPort(addr); err == nil && port != "0" {
		if host == "" {
			host = "::" // every address
		}
		if ap, err := netip.ParseAddrPort(net.JoinHostPort(host, port)); err == nil {
			a.guard.Deny(ap)
		}
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	a.own(ln)
	return ln, nil
}

// own refuses deliveries to ln's address.
func (a *App) own(ln net.Listener) {
	if ta, ok := ln.Addr().(*net.TCPAddr); ok {
		a.guard.Deny(ta.AddrPort())
	}
}

// Serve answers HTTP on ln until Shutdown. Deliveries to ln are refused
// (see Listen, which refuses them from before ln is bound).
func (a *App) Serve(ln net.Listener) error {
	a.own(ln)
	err := a.http.Serve(limitConns(ln, a.maxConns))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Handler is the API and dashboard, for in-process use.
func (a *App) Handler() http.Handler { return a.http.Handler }

// MetricsHandler serves the node's metrics without credentials, for a
// listener of its own (hookd serve --metrics-addr); the API port answers
// GET /metrics only to the admin token.
func (a *App) MetricsHandler() http.Handler { return a.metrics.Handler() }

// Shutdown stops taking requests, lets accepted ones commit, lets in-flight
// sends finish or time out (cancelled when ctx ends), writes their results
// and closes the store.
func (a *App) Shutdown(ctx context.Context) error {
	a.stopping.Store(true)
	herr := a.http.Shutdown(ctx)
	kerr := a.keys.Stop(ctx)
	a.life.Stop()
	a.shed.Stop() // before ingest closes: it writes the shedding events (its decisions stand for ingest)
	a.ingest.Close()
	a.replays.Stop()
	if a.purger != nil {
		a.purger.Stop()
	}
	if a.cluster != nil {
		a.cluster.stop()
	}
	a.dispatch.Stop(ctx)
	a.outage.Stop()
	serr := a.store.Close()
	if a.lock != nil {
		a.lock.Close()
	}
	return errors.Join(herr, kerr, serr)
}
