// Package shed decides which subscriptions ingest sheds: those whose
// backlog is over a threshold and has not shrunk for a while (R4's escape
// valve). hookd cannot take on an unbounded liability for an endpoint that
// cannot keep up: a shed subscription's new deliveries are written skipped,
// so they are never sent on their own but stay replayable, and its /health
// says so. The event itself is still accepted for every other subscription.
//
// Every node decides from the same store counts, so nodes sharing a
// database agree within one check, with nothing to coordinate.
package shed

import (
	"context"
	"hookd/internal/outage"
	"log/slog"
	"sync"
	"time"
)

// Defaults: a backlog counts as not shrinking when it is no smaller than it
// was Window ago; shedding ends once it is back to Resume of the threshold.
const (
	DefaultThreshold = 100_000
	DefaultWindow    = 5 * time.Minute
	DefaultEvery     = 30 * time.Second
	Resume           = 0.8
)

// Counter is the store's count of pending deliveries per subscription,
// and the sheddings it keeps (store.Store's SubscriptionsShed).
type Counter interface {
	DeliveryPendingCounts(ctx context.Context, min int) (map[string]int, error)
	SubscriptionsShed(ctx context.Context) (map[string]time.Time, error)
}

type Config struct {
	Threshold int           // pending deliveries; <= 0 turns shedding off
	Window    time.Duration // how long a backlog must not shrink (default DefaultWindow)
	Every     time.Duration // how often the counts are read (default DefaultEvery)
	Log       *slog.Logger
	// Outage is told of a reading the store failed in an outage, which it
	// logs once for the node (nil: every failure is logged).
	Outage *outage.Tracker
	// Changed is told, off the shedder's lock, when this node begins or
	// ends shedding a subscription (nil: nobody is told); ctx ends with
	// Stop.
	Changed func(context.Context, Change)
}

// Change is one subscription's shedding beginning (Ended zero) or ending.
type Change struct {
	SubscriptionID string
	Since, Ended   time.Time
	Pending        int // its backlog when shedding began (0 in an ending)
}

// Shedder holds the decision per subscription; Shedding is safe to call
// from ingest at any time.
type Shedder struct {
	cfg    Config
	active func(subID string) bool // nil: every subscription counts
	mu     sync.Mutex
	subs   map[string]*backlog
	quit   chan struct{}
	done   chan struct{}
	ctx    context.Context // for Changed: ends with Stop
	cancel context.CancelFunc
}

type sample struct {
	at      time.Time
	pending int
}

// backlog is what is known of one subscription over the threshold.
type backlog struct {
	samples []sample // oldest first, reaching at least Window back when it can
	since   time.Time
}

func New(cfg Config) *Shedder {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Shedder{cfg: cfg, subs: map[string]*backlog{}, ctx: ctx, cancel: cancel}
}

// Shedding reports whether new deliveries of the subscription are shed, and
// since when. A nil Shedder sheds nothing.
func (s *Shedder) Shedding(subID string) (time.Time, bool) {
	if s == nil {
		return time.Time{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.subs[subID]; b != nil && !b.since.IsZero() {
		return b.since, true
	}
	return time.Time{}, false
}

// Count is how many subscriptions are shed now.
func (s *Shedder) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, b := range s.subs {
		if !b.since.IsZero() {
			n++
		}
	}
	return n
}

// Threshold is the pending count over which shedding may start.
func (s *Shedder) Threshold() int { return s.cfg.Threshold }

// observe applies one reading of the counts taken at now, then tells
// cfg.Changed what began or ended.
func (s *Shedder) observe(now time.Time, counts map[string]int) {
	var changes []Change
	defer func() {
		if s.cfg.Changed != nil {
			for _, c := range changes {
				s.cfg.Changed(s.ctx, c)
			}
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	ended := func(id string, b *backlog) {
		if !b.since.IsZero() {
			s.cfg.Log.Info("subscription no longer shed", "subscription", id)
			changes = append(changes, Change{SubscriptionID: id, Since: b.since, Ended: now})
		}
		delete(s.subs, id)
	}
	resume := int(float64(s.cfg.Threshold) * Resume)
	for id, b := range s.subs {
		if _, ok := counts[id]; !ok { // at or under Resume: the count leaves it out
			ended(id, b)
		}
	}
	for id, n := range counts {
		if s.active != nil && !s.active(id) {
			// A paused subscription's backlog grows by the operator's choice:
			// it is held, not failing, and is judged afresh once it resumes.
			if b := s.subs[id]; b != nil {
				ended(id, b)
			}
			continue
		}
		b := s.subs[id]
		if b == nil {
			if n <= s.cfg.Threshold {
				continue // between Resume and the threshold, and not shed: nothing to watch yet
			}
			b = &backlog{}
			s.subs[id] = b
		}
		b.samples = append(b.samples, sample{now, n})
		// Keep the newest sample at least Window old, and everything after it.
		for len(b.samples) > 1 && now.Sub(b.samples[1].at) >= s.cfg.Window {
			b.samples = b.samples[1:]
		}
		switch {
		case !b.since.IsZero() && n <= resume:
			ended(id, b)
		case b.since.IsZero() && n > s.cfg.Threshold:
			if old := b.samples[0]; now.Sub(old.at) >= s.cfg.Window && n >= old.pending {
				b.since = now
				s.cfg.Log.Warn("shedding a subscription at ingest: backlog over threshold and not shrinking",
					"subscription", id, "pending", n, "threshold", s.cfg.Threshold, "pending_then", old.pending, "window", s.cfg.Window)
				changes = append(changes, Change{SubscriptionID: id, Since: now, Pending: n})
			}
		}
	}
}

// Start takes up the sheddings the store keeps (begun by any node, this
// one before a restart), then reads the counts now and every cfg.Every
// until Stop, judging only subscriptions active says are active. With
// shedding turned off it does nothing.
func (s *Shedder) Start(c Counter, active func(subID string) bool) {
	s.active = active
	s.quit, s.done = make(chan struct{}), make(chan struct{})
	if s.cfg.Threshold <= 0 {
		close(s.done)
		return
	}
	go func() {
		defer close(s.done)
		s.takeUp(c)
		t := time.NewTicker(s.cfg.Every)
		defer t.Stop()
		for {
			began := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Every)
			counts, err := c.DeliveryPendingCounts(ctx, int(float64(s.cfg.Threshold)*Resume)+1)
			cancel()
			if err != nil {
				s.cfg.Outage.Report(s.cfg.Log, "counting backlogs for shedding", began, err) // decisions stand until the next reading
			} else {
				s.observe(time.Now(), counts)
			}
			select {
			case <-s.quit:
				return
			case <-t.C:
			}
		}
	}()
}

// takeUp sheds what the store keeps shed, from when it began: a node
// restarted (or one joining) judged such a backlog afresh, and accepted it
// for the first Window. The next reading ends what is no longer over.
func (s *Shedder) takeUp(c Counter) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Every)
	kept, err := c.SubscriptionsShed(ctx)
	cancel()
	if err != nil {
		s.cfg.Outage.Report(s.cfg.Log, "reading the sheddings kept", began, err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, since := range kept {
		if s.subs[id] == nil {
			s.subs[id] = &backlog{since: since}
			s.cfg.Log.Info("shedding a subscription at ingest, as the store keeps", "subscription", id, "since", since)
		}
	}
}

func (s *Shedder) Stop() {
	if s == nil || s.quit == nil {
		return
	}
	s.cancel()
	close(s.quit)
	<-s.done
}
