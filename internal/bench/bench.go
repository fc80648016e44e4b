// Package bench is hookd's load harness (`hookd bench`). It starts a hookd
// node in-process (or targets a running one), starts a fleet of loopback
// receivers (in-process or in a child process), drives hookd only through
// its public HTTP API, and measures what arrives: throughput, the
// ingest-to-delivery lag, loss, duplicates, attempts and memory.
//
// Every event carries {"sent_ns": <unix ns when posted>, "seq": n}; each
// receiver computes the lag on arrival, keeps it in a fixed-memory
// histogram and keeps the set of seqs it answered 200, so the harness can
// tell, at the end, exactly which accepted events never reached every
// matching receiver (lost) and which arrived twice (duplicates).
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"hookd/internal/app"
	"hookd/internal/seal"
	"hookd/webhook"
)

// Scenarios.
const (
	Throughput = "throughput"
	Baseline   = "baseline"
	Isolation  = "isolation"
	Backlog    = "backlog"
)

// Options configure one run. Zero values take the documented defaults.
type Options struct {
	Scenario    string        // throughput (default), baseline, isolation, backlog
	Duration    time.Duration // load phase (default 10s); isolation: each of its two phases
	Drain       time.Duration // bound on the drain after the load (default 30s; backlog: from N and Rate)
	Concurrency int           // load-generator workers (default 32)
	Fanout      int           // matching subscriptions (receivers) per event (default 1)
	// BaselineDuration is the baseline phase of throughput (default min(Duration, 5s)).
	BaselineDuration time.Duration

	DB         string // in-process node: SQLite path (default: a temp file, removed after) or postgres:// URL
	Target     string // base URL of a running hookd; empty: start one in-process
	AdminToken string // for Target

	// ReceiversCommand, when set, runs the receivers in a child process:
	// see StartRemoteFleet for its arguments.
	ReceiversCommand []string
	// SharedHost serves every receiver of a fleet on one port, each at its
	// own path: one destination host for hookd, many endpoints on it.
	SharedHost bool

	Backlog    int     // backlog: events queued while the endpoint is down (default 100000)
	Rate       float64 // backlog: the subscription's rate_limit per second (default 200)
	RateEvents float64 // isolation: events posted per second in total (default 200)

	// CPUProfile, when set, receives a CPU profile of the run from the start
	// of the first hookd phase to the end (throughput's baseline phase is
	// left out, so the profile shows hookd's hot path).
	CPUProfile io.Writer

	Interval time.Duration // progress line period (default 2s)
	Version  string
	Out      io.Writer // progress lines (default io.Discard)
}

// Summary is the result of one run. Fields that belong to one scenario are
// left out of the others; the required ones are always present.
type Summary struct {
	Scenario             string   `json:"scenario"`
	DurationS            float64  `json:"duration_s"`
	EventsAccepted       uint64   `json:"events_accepted"`
	EventsAcceptedPerS   float64  `json:"events_accepted_per_s"`
	DeliveriesTotal      uint64   `json:"deliveries_total"`
	DeliveriesPerS       float64  `json:"deliveries_per_s"`
	BaselineDeliveriesPS *float64 `json:"baseline_deliveries_per_s"`
	RatioToBaseline      *float64 `json:"ratio_to_baseline"`
	// throughput, everything in-process: CPU time of the whole process per
	// delivery in each phase, and baseline's over hookd's.
	CPUUsPerDelivery         *float64 `json:"cpu_us_per_delivery,omitempty"`
	BaselineCPUUsPerDelivery *float64 `json:"baseline_cpu_us_per_delivery,omitempty"`
	CPURatioToBaseline       *float64 `json:"cpu_ratio_to_baseline,omitempty"`
	LagP50Ms                 float64  `json:"lag_p50_ms"`
	LagP99Ms                 float64  `json:"lag_p99_ms"`
	LagP999Ms                float64  `json:"lag_p999_ms"`
	LagMaxMs                 float64  `json:"lag_max_ms"`
	PostP50Ms                float64  `json:"post_p50_ms"`
	PostP99Ms                float64  `json:"post_p99_ms"`
	PostMaxMs                float64  `json:"post_max_ms"`
	AttemptsTotal            uint64   `json:"attempts_total"`
	AttemptsPerDelivery      float64  `json:"attempts_per_delivery"`
	Duplicates               uint64   `json:"duplicates"`
	Lost                     uint64   `json:"lost"`
	MissingDeliveries        uint64   `json:"missing_deliveries"`
	UnexpectedDeliveries     uint64   `json:"unexpected_deliveries"`
	PostErrors               uint64   `json:"post_errors"`
	FirstPostError           string   `json:"first_post_error,omitempty"`
	DrainS                   float64  `json:"drain_s"`
	Drained                  bool     `json:"drained"`
	PeakRSSMB                float64  `json:"peak_rss_mb"`
	RSSOf                    string   `json:"rss_of"`
	ReceiversPeakRSSMB       float64  `json:"receivers_peak_rss_mb,omitempty"`
	Fanout                   int      `json:"fanout"`
	Concurrency              int      `json:"concurrency"`
	Target                   string   `json:"target"`
	ReceiversProcess         bool     `json:"receivers_process"`
	SharedHost               bool     `json:"shared_host"`
	SignaturesChecked        uint64   `json:"signatures_checked"`
	SignatureFailures        uint64   `json:"signature_failures"`

	// isolation
	RateEventsPerS     *float64 `json:"rate_events_per_s,omitempty"`
	HealthyLagP50Ms    *float64 `json:"healthy_lag_p50_ms,omitempty"`
	HealthyLagP99Ms    *float64 `json:"healthy_lag_p99_ms,omitempty"`
	AllHealthyLagP50Ms *float64 `json:"all_healthy_lag_p50_ms,omitempty"`
	AllHealthyLagP99Ms *float64 `json:"all_healthy_lag_p99_ms,omitempty"`
	AllHealthyLost     *uint64  `json:"all_healthy_lost,omitempty"`
	HangingAttempts    *uint64  `json:"hanging_attempts,omitempty"`

	// backlog
	Backlog             *int     `json:"backlog,omitempty"`
	RateLimit           *float64 `json:"rate_limit,omitempty"`
	MaxDeliveryRatePerS *uint64  `json:"max_delivery_rate_per_s,omitempty"`
	RateLimitExceeded   *bool    `json:"rate_limit_exceeded,omitempty"`
}

// Required lists the JSON fields every summary has.
var Required = []string{"scenario", "duration_s", "events_accepted_per_s", "deliveries_per_s",
	"ratio_to_baseline", "lag_p50_ms", "lag_p99_ms", "lag_p999_ms", "attempts_per_delivery",
	"peak_rss_mb", "lost"}

func (o *Options) defaults() error {
	if o.Scenario == "" {
		o.Scenario = Throughput
	}
	switch o.Scenario {
	case Throughput, Baseline, Isolation, Backlog:
	default:
		return fmt.Errorf("--scenario %q: want throughput, baseline, isolation or backlog", o.Scenario)
	}
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	if o.Duration > 24*time.Hour {
		return errors.New("--duration: at most 24h")
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 32
	}
	if o.Concurrency > 4096 {
		return errors.New("--concurrency: at most 4096")
	}
	if o.Fanout <= 0 {
		o.Fanout = 1
	}
	if o.Fanout > 100 {
		return errors.New("--fanout: at most 100 (one subscription may match at most this many receivers here)")
	}
	if o.BaselineDuration <= 0 {
		o.BaselineDuration = min(o.Duration, 5*time.Second)
	}
	if o.Backlog <= 0 {
		o.Backlog = 100000
	}
	if o.Backlog > maxSeq/2 {
		return fmt.Errorf("--backlog: at most %d", maxSeq/2)
	}
	if o.Rate <= 0 {
		o.Rate = 200
	}
	if o.Rate > 100000 {
		return errors.New("--rate: at most 100000 (hookd's rate_limit bound)")
	}
	if o.RateEvents <= 0 {
		o.RateEvents = 200
	}
	if o.Drain <= 0 {
		o.Drain = 30 * time.Second
		if o.Scenario == Backlog {
			// Twice the time the rate limit needs, plus slack; at most an hour.
			o.Drain = min(time.Duration(2*float64(o.Backlog)/o.Rate*float64(time.Second))+30*time.Second, time.Hour)
		}
	}
	if o.Interval <= 0 {
		o.Interval = 2 * time.Second
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	o.Out = &lockedWriter{w: o.Out} // progress lines come from several goroutines
	if o.Target != "" {
		if !strings.HasPrefix(o.Target, "http://127.") && !strings.HasPrefix(o.Target, "http://localhost") {
			return errors.New("--target: only a loopback http:// URL (http://127.0.0.1:PORT)")
		}
		if o.AdminToken == "" {
			return errors.New("--target needs --admin-token")
		}
		o.Target = strings.TrimRight(o.Target, "/")
	}
	return nil
}

// bench is the state of one run.
type bench struct {
	opts   Options
	seq    atomic.Uint64 // next event seq, unique across the run's phases
	runID  string
	api    *apiClient
	peakRx float64 // peak RSS of a receiver child process, MB
	rssOf  string
	stops  []func()
	prof   bool // CPU profile running
}

// Run performs one scenario and returns its summary. ctx cancels it
// (the summary then reflects what was measured so far, with an error).
func Run(ctx context.Context, opts Options) (*Summary, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	var id [4]byte
	rand.Read(id[:])
	b := &bench{opts: opts, runID: "r" + hex.EncodeToString(id[:])}
	defer func() {
		if b.prof {
			pprof.StopCPUProfile()
		}
		for i := len(b.stops) - 1; i >= 0; i-- {
			b.stops[i]()
		}
	}()
	switch {
	case opts.Target != "":
		b.rssOf = "the bench process (load generator"
	case opts.Scenario == Baseline:
		b.rssOf = "the bench process (load generator"
	default:
		b.rssOf = "the bench process (hookd in-process + load generator"
	}
	if opts.ReceiversCommand != nil {
		b.rssOf += "; receivers in a separate process, see receivers_peak_rss_mb)"
	} else {
		b.rssOf += " + receivers)"
	}
	ports := "a port per receiver"
	if opts.SharedHost {
		ports = "one port shared by all receivers"
	}
	fmt.Fprintf(opts.Out, "hookd bench: scenario %s, concurrency %d, fanout %d, %s; RSS is of %s\n", opts.Scenario, opts.Concurrency, opts.Fanout, ports, b.rssOf)
	var s *Summary
	var err error
	switch opts.Scenario {
	case Throughput:
		s, err = b.throughput(ctx)
	case Baseline:
		s, err = b.baseline(ctx)
	case Isolation:
		s, err = b.isolation(ctx)
	case Backlog:
		s, err = b.backlog(ctx)
	}
	if s != nil {
		_, hwm := selfRSS()
		s.PeakRSSMB = round(hwm, 1)
		s.RSSOf = b.rssOf
		s.ReceiversPeakRSSMB = round(b.peakRx, 1)
		s.Concurrency, s.ReceiversProcess = opts.Concurrency, opts.ReceiversCommand != nil
		s.SharedHost = opts.SharedHost
		s.Target = opts.Target
		if s.Target == "" && opts.Scenario != Baseline {
			s.Target = "in-process"
		}
	}
	return s, err
}

func (b *bench) newFleet(n int) (Fleet, error) {
	var f Fleet
	var err error
	if b.opts.ReceiversCommand != nil {
		f, err = StartRemoteFleet(b.opts.ReceiversCommand, n, b.opts.SharedHost)
	} else {
		f, err = NewLocalFleet(n, b.opts.SharedHost)
	}
	if err != nil {
		return nil, fmt.Errorf("starting receivers: %w", err)
	}
	return f, nil
}

// hookd gives the API client of the node under test, starting one
// in-process unless --target names one.
func (b *bench) hookd(ctx context.Context) error {
	if b.api != nil {
		return nil
	}
	if b.opts.Target != "" {
		b.api = newAPIClient(b.opts.Target, b.opts.AdminToken, b.opts.Concurrency)
		return b.api.must(ctx, http.StatusOK, "GET", "/readyz", nil, nil)
	}
	db := b.opts.DB
	if db == "" {
		dir, err := os.MkdirTemp("", "hookd-bench-")
		if err != nil {
			return err
		}
		b.stops = append(b.stops, func() { os.RemoveAll(dir) })
		db = filepath.Join(dir, "hookd.db")
	}
	var keys *seal.Keyring // SQLite: the key file beside the database
	if isPostgres(db) {
		fresh, drop, err := freshSchema(ctx, db)
		if err != nil {
			return err
		}
		b.stops = append(b.stops, drop)
		db = fresh
		// A fresh schema, dropped after: a key of its own, never stored.
		if keys, err = seal.Parse(seal.NewKey()); err != nil {
			return err
		}
	}
	var tok [16]byte
	rand.Read(tok[:])
	token := "adm_bench_" + hex.EncodeToString(tok[:])
	a, err := app.Open(ctx, app.Config{
		DB: db, AdminToken: token, Version: b.opts.Version, Keys: keys,
		AllowNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Log:           slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return fmt.Errorf("starting hookd: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a.Shutdown(sctx)
		return err
	}
	go a.Serve(ln)
	b.stops = append(b.stops, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		a.Shutdown(sctx)
	})
	b.api = newAPIClient("http://"+ln.Addr().String(), token, b.opts.Concurrency)
	return nil
}

// subscribeAll creates one subscription per receiver in urls, each for the
// event types types(i), hands its secret to the receiver, and arranges for
// it to be deleted at the end.
func (b *bench) subscribeAll(ctx context.Context, fl Fleet, types func(i int) string, extra func(i int) map[string]any) ([]string, error) {
	var ids []string
	for i, u := range fl.URLs() {
		fields := map[string]any{"url": u, "event_types": []string{types(i)}}
		if extra != nil {
			for k, v := range extra(i) {
				fields[k] = v
			}
		}
		s, err := b.api.subscribe(ctx, fields)
		if err != nil {
			return ids, err
		}
		ids = append(ids, s.ID)
		api := b.api
		b.stops = append(b.stops, func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			api.unsubscribe(dctx, s.ID)
		})
		if err := fl.SetSecret(i, s.Secret); err != nil {
			return ids, err
		}
	}
	return ids, nil
}

func (b *bench) eventType(phase string, i int) string {
	return fmt.Sprintf("bench.%s.%s.t%d", b.runID, phase, i)
}

// phase is one measured stretch of load against one receiver fleet.
type phase struct {
	b       *bench
	name    string
	fleet   Fleet
	expect  func(seq uint64) []int // receivers that must get seq
	counted []int                  // receivers whose deliveries count (all that expect anything)
	post    func(ctx context.Context, seq uint64) error

	issued     atomic.Uint64
	nAccepted  atomic.Uint64
	nExpected  atomic.Uint64
	postErrors atomic.Uint64
	mu         sync.Mutex
	accepted   bitset
	firstErr   string
	postHist   Hist // how long each accepted POST took
}

func (b *bench) newPhase(name string, fl Fleet, expect func(uint64) []int, counted []int) *phase {
	return &phase{b: b, name: name, fleet: fl, expect: expect, counted: counted}
}

func (p *phase) accept(seq uint64, took time.Duration) {
	p.mu.Lock()
	p.accepted.set(seq)
	p.postHist.Add(took.Microseconds())
	p.mu.Unlock()
	p.nAccepted.Add(1)
	p.nExpected.Add(uint64(len(p.expect(seq))))
}

func (p *phase) fail(err error) {
	p.postErrors.Add(1)
	p.mu.Lock()
	if p.firstErr == "" {
		p.firstErr = err.Error()
	}
	p.mu.Unlock()
}

// load runs workers until until, or until maxEvents are issued (0: no
// cap); rate > 0 paces the posts to that many per second in total.
func (p *phase) load(ctx context.Context, workers int, until time.Time, maxEvents uint64, rate float64) {
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(until) {
				k := p.issued.Add(1)
				if maxEvents > 0 && k > maxEvents {
					return
				}
				if rate > 0 {
					at := start.Add(time.Duration(float64(k-1) / rate * float64(time.Second)))
					if at.After(until) {
						return
					}
					if d := time.Until(at); d > 0 {
						t := time.NewTimer(d)
						select {
						case <-t.C:
						case <-ctx.Done():
							t.Stop()
							return
						}
					}
				}
				seq := p.b.seq.Add(1) - 1
				t0 := time.Now()
				if err := p.post(ctx, seq); err != nil {
					p.fail(err)
				} else {
					p.accept(seq, time.Since(t0))
				}
			}
		})
	}
	wg.Wait()
}

// hookdPoster posts events to hookd; typ names seq's event type.
func (p *phase) hookdPoster(typ func(seq uint64) string) func(context.Context, uint64) error {
	api := p.b.api
	return func(ctx context.Context, seq uint64) error {
		body := fmt.Appendf(nil, `{"type":%q,"payload":{"sent_ns":%d,"seq":%d}}`, typ(seq), time.Now().UnixNano(), seq)
		status, raw, err := api.do(ctx, "POST", "/v1/events", body)
		if err != nil {
			return err
		}
		if status != http.StatusAccepted && status != http.StatusOK {
			return fmt.Errorf("POST /v1/events answered %d: %.200s", status, raw)
		}
		return nil
	}
}

// baselinePoster is the ceiling: a bare net/http POST of the same
// envelope, signed per request like hookd signs, straight to each receiver.
func (p *phase) baselinePoster(secret string) func(context.Context, uint64) error {
	urls := p.fleet.URLs()
	tr := &http.Transport{Proxy: nil, MaxIdleConns: 4096, MaxIdleConnsPerHost: p.b.opts.Concurrency + 16, IdleConnTimeout: 30 * time.Second}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	p.b.stops = append(p.b.stops, tr.CloseIdleConnections)
	return func(ctx context.Context, seq uint64) error {
		id := "evt_bench" + strconv.FormatUint(seq, 10)
		for _, r := range p.expect(seq) {
			now := time.Now()
			body := fmt.Appendf(nil, `{"id":%q,"type":"bench.baseline","timestamp":%q,"data":{"sent_ns":%d,"seq":%d}}`,
				id, now.UTC().Format(time.RFC3339), now.UnixNano(), seq)
			sig, err := webhook.Sign(secret, id, now, body)
			if err != nil {
				return err
			}
			req, err := http.NewRequestWithContext(ctx, "POST", urls[r], strings.NewReader(string(body)))
			if err != nil {
				return err
			}
			req.Header.Set(webhook.HeaderID, id)
			req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
			req.Header.Set(webhook.HeaderSignature, sig)
			req.Header.Set("content-type", "application/json")
			req.Header.Set("user-agent", "hookd-bench-baseline")
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("receiver answered %d", resp.StatusCode)
			}
		}
		return nil
	}
}

// sums are the fleet's counters over the counted receivers.
type sums struct {
	requests, delivered, dups, sigChecked, sigFailed, maxPerSec uint64
	hist                                                        Hist
}

func (p *phase) sums(st []ReceiverStats) sums {
	var s sums
	for _, i := range p.counted {
		r := &st[i]
		s.requests += r.Requests
		s.delivered += r.Delivered
		s.dups += r.Duplicates
		s.sigChecked += r.SigChecked
		s.sigFailed += r.SigFailed
		s.maxPerSec = max(s.maxPerSec, r.MaxPerSec)
		s.hist.Merge(&r.Hist)
	}
	return s
}

// result is what one phase measured.
type result struct {
	loadS, drainS        float64
	drained              bool
	accepted, expected   uint64
	deliveredDuringLoad  uint64
	final                sums
	stats                []ReceiverStats
	lost, missing, unexp uint64
	postErrors           uint64
	firstErr             string
	post                 Hist
	cpu                  time.Duration // this process's CPU time over the phase
}

// run resets the fleet, runs load (which must return by its own bound),
// then waits up to drain for every expected delivery, printing a progress
// line every Interval throughout.
func (p *phase) run(ctx context.Context, load func(ctx context.Context), drain time.Duration) (*result, error) {
	if err := p.fleet.Reset(); err != nil {
		return nil, err
	}
	if o := p.b.opts.CPUProfile; o != nil && !p.b.prof && p.name != "baseline" {
		if err := pprof.StartCPUProfile(o); err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		p.b.prof = true
	}
	start, cpu0 := time.Now(), selfCPU()
	stopProgress := p.progress(start)
	load(ctx)
	loadEnd := time.Now()
	st, err := p.fleet.Stats()
	if err != nil {
		stopProgress()
		return nil, err
	}
	res := &result{loadS: loadEnd.Sub(start).Seconds(), deliveredDuringLoad: p.sums(st).delivered}

	deadline := loadEnd.Add(drain)
	lastExact := time.Time{}
	for {
		st, err = p.fleet.Stats()
		if err != nil {
			break
		}
		pending := int64(p.nExpected.Load()) - int64(p.sums(st).delivered)
		if pending <= 0 && time.Since(lastExact) > time.Second {
			// The counters say done; the exact check (seen sets) confirms.
			lastExact = time.Now()
			if lost, _, _, err := p.lost(); err == nil && lost == 0 {
				res.drained = true
				break
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
	res.drainS = time.Since(loadEnd).Seconds()
	res.cpu = selfCPU() - cpu0
	stopProgress()
	if err != nil {
		return nil, err
	}
	if st, err = p.fleet.Stats(); err != nil {
		return nil, err
	}
	res.stats = st
	res.final = p.sums(st)
	res.accepted, res.expected = p.nAccepted.Load(), p.nExpected.Load()
	res.postErrors = p.postErrors.Load()
	p.mu.Lock()
	res.firstErr, res.post = p.firstErr, p.postHist
	p.mu.Unlock()
	if res.lost, res.missing, res.unexp, err = p.lost(); err != nil {
		return nil, err
	}
	return res, nil
}

// lost counts accepted events not delivered to every receiver that should
// have them, the missing deliveries, and deliveries no accepted event
// explains (an event whose post failed on our side but was taken).
func (p *phase) lost() (lost, missing, unexpected uint64, err error) {
	seen := map[int]*bitset{}
	for _, i := range p.counted {
		words, err := p.fleet.Seen(i)
		if err != nil {
			return 0, 0, 0, err
		}
		seen[i] = &bitset{words: words}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.accepted.each(func(seq uint64) {
		miss := false
		for _, r := range p.expect(seq) {
			if !seen[r].has(seq) {
				missing++
				miss = true
			}
		}
		if miss {
			lost++
		}
	})
	for _, i := range p.counted {
		seen[i].each(func(seq uint64) {
			if !p.accepted.has(seq) || !contains(p.expect(seq), i) {
				unexpected++
			}
		})
	}
	return lost, missing, unexpected, nil
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// progress prints one line every Interval until the returned stop is called.
func (p *phase) progress(start time.Time) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(p.b.opts.Interval)
		defer t.Stop()
		var prevAcc uint64
		var prev sums
		prevAt := start
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				st, err := p.fleet.Stats()
				if err != nil {
					continue
				}
				cur := p.sums(st)
				dt := now.Sub(prevAt).Seconds()
				acc := p.nAccepted.Load()
				win := cur.hist.Sub(&prev.hist)
				rss, _ := selfRSS()
				rx := ""
				if r := p.fleet.RSSMB(); r > 0 {
					p.b.peakRx = max(p.b.peakRx, r)
					rx = fmt.Sprintf(" receivers_rss=%.0fMB", r)
				}
				fmt.Fprintf(p.b.opts.Out, "[%s] t=%5.1fs accepted/s=%-7.0f deliveries/s=%-7.0f lag_p50=%.1fms lag_p99=%.1fms pending=%d rss=%.0fMB%s\n",
					p.name, now.Sub(start).Seconds(), float64(acc-prevAcc)/dt, float64(cur.delivered-prev.delivered)/dt,
					win.QuantileMs(0.5), win.QuantileMs(0.99), max(0, int64(p.nExpected.Load())-int64(cur.delivered)), rss, rx)
				prevAcc, prev, prevAt = acc, cur, now
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		if r := p.fleet.RSSMB(); r > 0 {
			p.b.peakRx = max(p.b.peakRx, r)
		}
	}
}

// fill sets the fields every scenario shares from a phase result.
func (s *Summary) fill(r *result, loadS float64) {
	s.DurationS = round(loadS, 3)
	s.EventsAccepted = r.accepted
	s.EventsAcceptedPerS = round(float64(r.accepted)/loadS, 1)
	s.DeliveriesTotal = r.final.delivered
	s.DeliveriesPerS = round(float64(r.deliveredDuringLoad)/loadS, 1)
	s.LagP50Ms = round(r.final.hist.QuantileMs(0.5), 3)
	s.LagP99Ms = round(r.final.hist.QuantileMs(0.99), 3)
	s.LagP999Ms = round(r.final.hist.QuantileMs(0.999), 3)
	s.LagMaxMs = round(r.final.hist.QuantileMs(1), 3)
	s.PostP50Ms = round(r.post.QuantileMs(0.5), 3)
	s.PostP99Ms = round(r.post.QuantileMs(0.99), 3)
	s.PostMaxMs = round(r.post.QuantileMs(1), 3)
	s.AttemptsTotal = r.final.requests
	if r.final.delivered > 0 {
		s.AttemptsPerDelivery = round(float64(r.final.requests)/float64(r.final.delivered), 4)
	}
	s.Duplicates = r.final.dups
	s.Lost, s.MissingDeliveries, s.UnexpectedDeliveries = r.lost, r.missing, r.unexp
	s.PostErrors, s.FirstPostError = r.postErrors, r.firstErr
	s.DrainS = round(r.drainS, 3)
	s.Drained = r.drained
	s.SignaturesChecked, s.SignatureFailures = r.final.sigChecked, r.final.sigFailed
}

func round(v float64, digits int) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func ptr[T any](v T) *T { return &v }

func allReceivers(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// runBaseline measures the bare POST loop against fl for d.
func (b *bench) runBaseline(ctx context.Context, fl Fleet, d time.Duration) (*result, error) {
	all := allReceivers(len(fl.URLs()))
	p := b.newPhase("baseline", fl, func(uint64) []int { return all }, all)
	secret, err := webhook.NewSecret()
	if err != nil {
		return nil, err
	}
	for i := range all {
		if err := fl.SetSecret(i, secret); err != nil {
			return nil, err
		}
	}
	p.post = p.baselinePoster(secret)
	return p.run(ctx, func(ctx context.Context) {
		p.load(ctx, b.opts.Concurrency, time.Now().Add(d), 0, 0)
	}, 5*time.Second)
}

func (b *bench) baseline(ctx context.Context) (*Summary, error) {
	fl, err := b.newFleet(b.opts.Fanout)
	if err != nil {
		return nil, err
	}
	defer fl.Close()
	r, err := b.runBaseline(ctx, fl, b.opts.Duration)
	if err != nil {
		return nil, err
	}
	s := &Summary{Scenario: Baseline, Fanout: b.opts.Fanout}
	s.fill(r, r.loadS)
	s.BaselineDeliveriesPS = ptr(s.DeliveriesPerS)
	s.RatioToBaseline = ptr(1.0)
	return s, nil
}

func (b *bench) throughput(ctx context.Context) (*Summary, error) {
	fl, err := b.newFleet(b.opts.Fanout)
	if err != nil {
		return nil, err
	}
	defer fl.Close()
	base, err := b.runBaseline(ctx, fl, b.opts.BaselineDuration)
	if err != nil {
		return nil, fmt.Errorf("baseline phase: %w", err)
	}
	baseRate := float64(base.deliveredDuringLoad) / base.loadS
	if err := b.hookd(ctx); err != nil {
		return nil, err
	}
	typ := b.eventType("tp", 0)
	if _, err := b.subscribeAll(ctx, fl, func(int) string { return typ }, nil); err != nil {
		return nil, err
	}
	all := allReceivers(b.opts.Fanout)
	p := b.newPhase("throughput", fl, func(uint64) []int { return all }, all)
	p.post = p.hookdPoster(func(uint64) string { return typ })
	r, err := p.run(ctx, func(ctx context.Context) {
		p.load(ctx, b.opts.Concurrency, time.Now().Add(b.opts.Duration), 0, 0)
	}, b.opts.Drain)
	if err != nil {
		return nil, err
	}
	s := &Summary{Scenario: Throughput, Fanout: b.opts.Fanout}
	s.fill(r, r.loadS)
	s.BaselineDeliveriesPS = ptr(round(baseRate, 1))
	if baseRate > 0 {
		s.RatioToBaseline = ptr(round(s.DeliveriesPerS/baseRate, 4))
	}
	// With hookd, load generator and receivers in this process, CPU per
	// delivery compares the two phases by work done, which other load on
	// the machine disturbs far less than it does deliveries per second.
	// (Not with PostgreSQL: its server's CPU is another process's.)
	if b.opts.Target == "" && b.opts.ReceiversCommand == nil && !isPostgres(b.opts.DB) &&
		r.final.delivered > 0 && base.final.delivered > 0 {
		hk := r.cpu.Seconds() * 1e6 / float64(r.final.delivered)
		bl := base.cpu.Seconds() * 1e6 / float64(base.final.delivered)
		s.CPUUsPerDelivery, s.BaselineCPUUsPerDelivery = ptr(round(hk, 1)), ptr(round(bl, 1))
		s.CPURatioToBaseline = ptr(round(bl/hk, 4))
	}
	return s, ctx.Err()
}

// isolation: ten endpoints, each subscribed to its own event type; the
// first hangs and gets 10 % of the events. Then the same with all ten
// healthy, on a fresh fleet and fresh subscriptions. With SharedHost all
// ten are paths of one host, so only per-endpoint admission keeps the
// hanging one from holding the others back.
func (b *bench) isolation(ctx context.Context) (*Summary, error) {
	const n = 10
	if err := b.hookd(ctx); err != nil {
		return nil, err
	}
	one := make([][]int, n)
	for i := range one {
		one[i] = []int{i}
	}
	runOnce := func(name string, hang bool) (*result, error) {
		fl, err := b.newFleet(n)
		if err != nil {
			return nil, err
		}
		defer fl.Close()
		phaseName := strings.ReplaceAll(name, "_", "")
		ids, err := b.subscribeAll(ctx, fl, func(i int) string { return b.eventType(phaseName, i) },
			func(i int) map[string]any { return map[string]any{"timeout": "10s"} })
		if err != nil {
			return nil, err
		}
		counted := allReceivers(n)
		expect := func(seq uint64) []int { return one[seq%n] }
		if hang {
			if err := fl.SetMode(0, ModeHang); err != nil {
				return nil, err
			}
			counted = counted[1:]
			expect = func(seq uint64) []int {
				if seq%n == 0 {
					return nil
				}
				return one[seq%n]
			}
		}
		p := b.newPhase(name, fl, expect, counted)
		p.post = p.hookdPoster(func(seq uint64) string { return b.eventType(phaseName, int(seq%n)) })
		r, err := p.run(ctx, func(ctx context.Context) {
			p.load(ctx, b.opts.Concurrency, time.Now().Add(b.opts.Duration), 0, b.opts.RateEvents)
		}, b.opts.Drain)
		// Delete this phase's subscriptions now (their pending deliveries
		// are skipped) so the hanging one stops being retried.
		for _, id := range ids {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			b.api.unsubscribe(dctx, id)
			cancel()
		}
		return r, err
	}
	hung, err := runOnce("isolation_hang", true)
	if err != nil {
		return nil, err
	}
	healthy, err := runOnce("isolation_healthy", false)
	if err != nil {
		return nil, err
	}
	s := &Summary{Scenario: Isolation, Fanout: 1}
	s.fill(hung, hung.loadS)
	s.RateEventsPerS = ptr(b.opts.RateEvents)
	s.HealthyLagP50Ms = ptr(s.LagP50Ms)
	s.HealthyLagP99Ms = ptr(s.LagP99Ms)
	s.AllHealthyLagP50Ms = ptr(round(healthy.final.hist.QuantileMs(0.5), 3))
	s.AllHealthyLagP99Ms = ptr(round(healthy.final.hist.QuantileMs(0.99), 3))
	s.AllHealthyLost = ptr(healthy.lost)
	s.HangingAttempts = ptr(hung.stats[0].Requests)
	return s, ctx.Err()
}

// backlog: one subscription with rate_limit, paused (its endpoint down)
// while N events are posted as fast as hookd takes them; then the endpoint
// recovers and the subscription is resumed, and the drain is timed.
func (b *bench) backlog(ctx context.Context) (*Summary, error) {
	if err := b.hookd(ctx); err != nil {
		return nil, err
	}
	fl, err := b.newFleet(1)
	if err != nil {
		return nil, err
	}
	defer fl.Close()
	typ := b.eventType("bl", 0)
	sched := make([]string, 10)
	for i := range sched {
		sched[i] = "1s"
	}
	ids, err := b.subscribeAll(ctx, fl, func(int) string { return typ },
		func(int) map[string]any { return map[string]any{"rate_limit": b.opts.Rate, "retry_schedule": sched} })
	if err != nil {
		return nil, err
	}
	// Down: paused in hookd (the backlog builds without burning attempts),
	// and the endpoint answers 503 should anything be sent anyway.
	if err := b.api.patch(ctx, ids[0], map[string]any{"state": "paused"}); err != nil {
		return nil, err
	}
	if err := fl.SetMode(0, ModeDown); err != nil {
		return nil, err
	}
	all := []int{0}
	p := b.newPhase("backlog", fl, func(uint64) []int { return all }, all)
	p.post = p.hookdPoster(func(uint64) string { return typ })
	var postS float64
	r, err := p.run(ctx, func(ctx context.Context) {
		start := time.Now()
		// Bounded: N events, and at most 30 minutes of posting.
		p.load(ctx, b.opts.Concurrency, start.Add(30*time.Minute), uint64(b.opts.Backlog), 0)
		postS = time.Since(start).Seconds()
		fmt.Fprintf(b.opts.Out, "[backlog] %d events accepted in %.1fs; endpoint recovers, subscription resumed\n", p.nAccepted.Load(), postS)
		// Recover: from here on the drain is measured. Reset the receiver's
		// rate window so it sees only the drain.
		fl.SetMode(0, ModeOK)
		fl.Reset()
		if err := b.api.patch(ctx, ids[0], map[string]any{"state": "active"}); err != nil {
			p.fail(err)
		}
	}, b.opts.Drain)
	if err != nil {
		return nil, err
	}
	s := &Summary{Scenario: Backlog, Fanout: 1}
	s.fill(r, postS)
	// The load phase only posts; what counts is the drain.
	if r.drainS > 0 {
		s.DeliveriesPerS = round(float64(r.final.delivered)/r.drainS, 1)
	}
	s.Backlog = ptr(b.opts.Backlog)
	s.RateLimit = ptr(b.opts.Rate)
	s.MaxDeliveryRatePerS = ptr(r.final.maxPerSec)
	s.RateLimitExceeded = ptr(float64(r.final.maxPerSec) > b.opts.Rate)
	return s, ctx.Err()
}
