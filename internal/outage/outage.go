// Package outage follows whether a node's store can commit, for /readyz and
// for the log. A store outage (store.ErrUnavailable, store.ErrFull) is
// logged once when it begins (ERROR), again at most every Repeat while it
// lasts with how many calls failed meanwhile, and once when it ends (INFO)
// with how long it lasted. Every part of the node reports its failed store
// calls here instead of logging each: the API's error path (Fail) and the
// background tasks, the dispatcher, lease loop and replay runner (Report).
// An 11 s PostgreSQL restart once logged 4,128 ERROR lines, and an 8 s one
// under ingest still 373 from the background, and nothing when it came
// back.
//
// It ends only when a write commits again with no call failed for a Probe
// interval: while it lasts a prober tries one (store.HealthWrite) every
// Probe, so readiness comes back without a request and without a restart;
// a probe that finds a connection not yet cut, a moment after the first
// failure, does not end it (a cut PostgreSQL once logged an outage begun,
// ended 3 ms later, and begun again). While all is well the prober pings the
// store (a read) every Ping, so an idle node notices an unreachable
// database too; and when no write was seen committing for Write it tries a
// write instead, so an idle node notices a full disk or a database that
// refuses writes (a read still works on both). /readyz itself never
// touches the store.
package outage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"hookd/internal/store"
)

// Checker is what the tracker asks of the store.
type Checker interface {
	HealthPing(ctx context.Context) error
	HealthWrite(ctx context.Context) error
	HealthOutage(err error) error
}

type Config struct {
	Log *slog.Logger
	// Repeat is how often a lasting outage is logged again (default 30s).
	Repeat time.Duration
	// Ping is how often a healthy store is pinged (default 5s); Probe how
	// often a write is tried while writes fail (default 1s).
	Ping, Probe time.Duration
	// Write is how long a healthy store may go without a write seen
	// committing (Committed, or a probe's) before the prober tries one
	// in place of a ping (default 30s).
	Write time.Duration
}

const (
	DefaultRepeat = 30 * time.Second
	DefaultPing   = 5 * time.Second
	DefaultProbe  = time.Second
	DefaultWrite  = 30 * time.Second
	checkTimeout  = 5 * time.Second
)

// Kind names an outage for logs and readiness: unavailable or full.
func Kind(err error) string {
	if errors.Is(err, store.ErrFull) {
		return "full"
	}
	return "unavailable"
}

// Is reports whether err is a store outage rather than the call's own fault.
func Is(err error) bool {
	return errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrFull)
}

// Tracker is one node's view of its store's health. Its methods are safe
// for concurrent use and do nothing on a nil *Tracker. One mutex guards
// the state; the prober goroutine only calls the methods.
type Tracker struct {
	cfg   Config
	check Checker
	now   func() time.Time // tests

	mu       sync.Mutex
	down     bool
	err      error     // the latest failure of this outage
	since    time.Time // when it began
	logged   time.Time // when it was last logged
	failures int       // failed calls since it was last logged
	total    int       // failed calls in this outage
	failed   time.Time // when a call last failed
	wrote    time.Time // when a write was last seen committing
	ended    time.Time // when the last outage ended

	wake chan struct{} // a failure starts probing now
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

// New makes a tracker; Start runs its prober.
func New(cfg Config, check Checker) *Tracker {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Repeat <= 0 {
		cfg.Repeat = DefaultRepeat
	}
	if cfg.Ping <= 0 {
		cfg.Ping = DefaultPing
	}
	if cfg.Probe <= 0 {
		cfg.Probe = DefaultProbe
	}
	if cfg.Write <= 0 {
		cfg.Write = DefaultWrite
	}
	t := &Tracker{cfg: cfg, check: check, now: time.Now,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	t.wrote = t.now() // opening the store migrated it
	return t
}

// Start runs the prober until Stop.
func (t *Tracker) Start() { go t.loop() }

// Stop ends the prober (before the store closes).
func (t *Tracker) Stop() {
	if t == nil {
		return
	}
	t.once.Do(func() { close(t.quit) })
	<-t.done
}

// Fail records a call begun at began that failed with a store outage (see
// Is). The first begins the outage; later ones are counted and logged at
// most every Repeat. A call begun before the last outage ended is that
// outage's straggler, not a new one: a lease renewal that hung on a cut
// connection once failed just after the probe had ended the outage, and
// logged another outage begun with the store fine.
func (t *Tracker) Fail(began time.Time, err error) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.down && began.Before(t.ended) {
		return
	}
	now := t.now()
	t.err, t.failed = err, now
	if !t.down {
		t.down, t.since, t.logged, t.failures, t.total = true, now, now, 0, 1
		t.cfg.Log.Error("store outage began", "kind", Kind(err), "err", err)
		select {
		case t.wake <- struct{}{}:
		default:
		}
		return
	}
	t.failures++
	t.total++
	if now.Sub(t.logged) >= t.cfg.Repeat {
		t.cfg.Log.Error("store outage continues", "kind", Kind(err), "for", now.Sub(t.since).Round(time.Millisecond),
			"failed_calls", t.failures, "err", err)
		t.logged, t.failures = now, 0
	}
}

// Report is how a background task tells of a store call begun at began
// that failed: an outage (by the store's reckoning, see
// store.HealthOutage) is counted as by Fail, and logged only as the
// outage; any other error is logged as msg with args and err. It reports
// whether err was an outage. On a nil *Tracker every error is logged.
func (t *Tracker) Report(log *slog.Logger, msg string, began time.Time, err error, args ...any) bool {
	if t != nil {
		err = t.check.HealthOutage(err)
	}
	if t == nil || !Is(err) {
		log.Error(msg, append(args, "err", err)...)
		return Is(err)
	}
	t.Fail(began, err)
	return true
}

// Committed tells of a write that committed: while all is well the prober
// then needs no write of its own to know writes work. It does not end an
// outage (only a probe's write does: a small write may commit where an
// event would not).
func (t *Tracker) Committed() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.wrote = t.now()
}

// recovered ends an outage: a write committed, and no call has failed
// for a Probe interval.
func (t *Tracker) recovered() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.wrote = t.now()
	if !t.down || t.now().Sub(t.failed) < t.cfg.Probe {
		return
	}
	t.cfg.Log.Info("store outage ended", "kind", Kind(t.err), "lasted", t.now().Sub(t.since).Round(time.Millisecond),
		"failed_calls", t.total)
	t.down, t.err, t.ended = false, nil, t.now()
}

// Err is nil while the store commits, or says which outage and for how
// long: store.ErrUnavailable or store.ErrFull. Not the driver's error: it
// is shown on /readyz, which anyone reaching the node may call, and would
// name the database's address; the log has it.
func (t *Tracker) Err() error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.down {
		return nil
	}
	sentinel := store.ErrUnavailable
	if errors.Is(t.err, store.ErrFull) {
		sentinel = store.ErrFull
	}
	return fmt.Errorf("%w for %s (since %s; the log has the cause)", sentinel,
		t.now().Sub(t.since).Round(time.Second), t.since.UTC().Format(time.RFC3339))
}

// state says whether an outage lasts and whether the prober should write
// rather than ping: during an outage, or after Write without a commit.
func (t *Tracker) state() (down, write bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.down, t.down || t.now().Sub(t.wrote) >= t.cfg.Write
}

// loop pings while all is well, and writes while it is not or when no
// write was seen committing for a while.
func (t *Tracker) loop() {
	defer close(t.done)
	timer := time.NewTimer(t.cfg.Ping)
	defer timer.Stop()
	for {
		select {
		case <-t.quit:
			return
		case <-timer.C:
		case <-t.wake:
		}
		_, write := t.state()
		ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		began := t.now()
		if write {
			if err := t.check.HealthWrite(ctx); err != nil {
				t.Fail(began, err)
			} else {
				t.recovered()
			}
		} else if err := t.check.HealthPing(ctx); err != nil {
			t.Fail(began, err) // a read that fails: the store is unreachable
		}
		cancel()
		next := t.cfg.Ping
		if down, _ := t.state(); down {
			next = t.cfg.Probe
		}
		timer.Reset(next)
	}
}
