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
	"strings"
	"sync/atomic"
	"time"

	"hookd/internal/api"
	"hookd/internal/core"
	"hookd/internal/dispatch"
	"hookd/internal/ingest"
	"hookd/internal/metrics"
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
	// Keys seal subscriptions' secrets and headers at rest (nil: on SQLite
	// the key file next to the database, see SecretKeys; PostgreSQL
	// refuses to start).
	Keys *seal.Keyring
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
	cluster  *cluster // nil on a store one node holds (SQLite)
	http     *http.Server
	metrics  *metrics.Metrics
	stopping atomic.Bool
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
	guard := send.NewGuard(cfg.AllowNetworks)
	// Each node has its own registry: several nodes in one process (tests,
	// benchmarks) never collide.
	a := &App{cfg: cfg, store: st, subs: reg, metrics: metrics.New()}
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
	a.dispatch = dispatch.New(dispatch.Config{
		Store: st, Subs: reg, Log: cfg.Log,
		Sender:          send.New(send.Config{Guard: guard, UserAgent: "hookd/" + cfg.Version}),
		HostConcurrency: cfg.HostConcurrency,
		Metrics:         a.metrics,
		Resync:          resync,
		Node:            cfg.Node,
		LeaseTTL:        cfg.LeaseTTL,
		Disable:         a.subsvc.Disable,
	})
	a.metrics.WatchDispatcher(func() metrics.DispatchStats { return metrics.DispatchStats(a.dispatch.Stats()) })
	if err := a.dispatch.Start(ctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("starting dispatcher: %w", err)
	}
	if shared {
		a.cluster = startCluster(st, a.subsvc, a.dispatch, cfg.Log)
	}
	shedCfg := cfg.Shed
	shedCfg.Log = cfg.Log
	a.shed = shed.New(shedCfg)
	a.shed.Start(st, func(id string) bool {
		sub, ok := reg.Get(id)
		return ok && sub.State == core.SubActive
	})
	a.metrics.WatchShed(a.shed.Count)
	a.ingest = ingest.New(st, reg, a.dispatch.Notify, ingest.WithMetrics(a.metrics), ingest.WithShedder(a.shed),
		ingest.WithReservations(a.dispatch.Reserve, a.dispatch.Release))
	a.replays = replay.New(st, reg, a.dispatch, cfg.Log)
	if cfg.Retention > 0 {
		a.purger = retention.Start(st, cfg.Retention, cfg.Log)
	}
	handler := api.New(api.Config{
		Store: st, Subs: a.subsvc, Ingest: a.ingest, Dispatch: a.dispatch, Replays: a.replays, Guard: guard,
		AdminToken: cfg.AdminToken, Version: cfg.Version, Log: cfg.Log, Metrics: a.metrics, Shed: a.shed,
		Ready: func() error {
			if a.stopping.Load() {
				return errors.New("shutting down")
			}
			return nil
		},
	})
	// The dashboard is static files calling /v1 from the browser; / leads to it.
	root := http.NewServeMux()
	root.Handle("/", handler)
	root.Handle("GET /ui/", ui.Handler())
	root.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	a.http = &http.Server{Handler: root, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(cfg.Log.Handler(), slog.LevelWarn)}
	return a, nil
}

// Serve answers HTTP on ln until Shutdown.
func (a *App) Serve(ln net.Listener) error {
	err := a.http.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Handler is the API and dashboard, for in-process use.
func (a *App) Handler() http.Handler { return a.http.Handler }

// Shutdown stops taking requests, lets accepted ones commit, lets in-flight
// sends finish or time out (cancelled when ctx ends), writes their results
// and closes the store.
func (a *App) Shutdown(ctx context.Context) error {
	a.stopping.Store(true)
	herr := a.http.Shutdown(ctx)
	a.ingest.Close()
	a.shed.Stop()
	a.replays.Stop()
	if a.purger != nil {
		a.purger.Stop()
	}
	if a.cluster != nil {
		a.cluster.stop()
	}
	a.dispatch.Stop(ctx)
	serr := a.store.Close()
	return errors.Join(herr, serr)
}
