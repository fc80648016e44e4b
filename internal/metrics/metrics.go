// Package metrics holds hookd's Prometheus metrics: one Metrics per node,
// with its own registry (never the global one, so tests and several nodes in
// one process do not collide), served on GET /metrics.
//
// Labels stay low-cardinality: never an event, delivery or subscription ID,
// never a host. Every labelled child is created up front, so the hot path
// only adds to a counter or a histogram (no map lookup, no allocation) and a
// series reads 0 before its first event instead of being absent.
//
// Every method is safe on a nil *Metrics (it does nothing), so parts built
// without metrics (unit tests, simulations) need no stub.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Rejection reasons for hookd_events_rejected_total: a closed set.
const (
	ReasonInvalid      = "invalid"
	ReasonTooLarge     = "too_large"
	ReasonUnauthorized = "unauthorized"
	ReasonNotFound     = "not_found"
	ReasonUnavailable  = "unavailable"
	ReasonInternal     = "internal"
	ReasonRateLimited  = "rate_limited"
	ReasonFull         = "full"
)

var reasons = []string{ReasonInvalid, ReasonTooLarge, ReasonUnauthorized, ReasonNotFound, ReasonUnavailable, ReasonInternal,
	ReasonRateLimited, ReasonFull}

// Outcome is what one attempt did to its delivery (hookd_attempts_total).
type Outcome int

const (
	OutcomeDelivered Outcome = iota // 2xx: delivered
	OutcomeRetry                    // another attempt is scheduled
	OutcomeFail                     // failed now: a non-retryable answer or the schedule is spent
	OutcomeGone                     // 410: failed and the subscription disabled
	numOutcomes
)

func (o Outcome) String() string {
	return [...]string{"delivered", "retry", "fail", "gone"}[o]
}

// Buckets. Lag spans a send that works at once (milliseconds) to the end
// of the default retry window (about a day).
var (
	lagBuckets = []float64{
		.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
		1800, 3600, 7200, 21600, 43200, 86400,
	}
	attemptBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	commitBuckets  = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
	batchBuckets   = prometheus.ExponentialBuckets(1, 2, 9) // 1 … 256, the ingester's largest batch
)

// Metrics is one node's metrics.
type Metrics struct {
	reg *prometheus.Registry

	eventsAccepted  prometheus.Counter
	eventsDuplicate prometheus.Counter
	eventsRejected  map[string]prometheus.Counter // by reason; filled once, read-only after
	commitBatch     prometheus.Histogram
	commitSeconds   prometheus.Histogram

	createdPending   prometheus.Counter
	createdSkipped   prometheus.Counter
	attempts         [numOutcomes]prometheus.Counter
	finishedOK       prometheus.Counter
	finishedFailed   prometheus.Counter
	attemptDuration  prometheus.Histogram
	deliveryLag      prometheus.Histogram
	deliveriesExpird prometheus.Counter
}

// New makes a node's metrics on a fresh registry, with the Go runtime and
// process collectors.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m := &Metrics{reg: reg, eventsRejected: map[string]prometheus.Counter{}}

	m.eventsAccepted = counter(f, "hookd_events_accepted_total", "Events accepted and committed (answered 202).")
	m.eventsDuplicate = counter(f, "hookd_events_duplicate_total", "Idempotent repeats: an idempotency_key already used, answered 200 with the first event's id.")
	rejected := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookd_events_rejected_total",
		Help: "POST /v1/events answered with an error, by reason.",
	}, []string{"reason"})
	f(rejected)
	for _, r := range reasons {
		m.eventsRejected[r] = rejected.WithLabelValues(r)
	}
	m.commitBatch = histogram(f, "hookd_ingest_commit_batch_size", "Events written per ingest group commit (idempotent repeats write none).", batchBuckets)
	m.commitSeconds = histogram(f, "hookd_ingest_commit_seconds", "Duration of one ingest group commit (the transaction, fsync included).", commitBuckets)

	created := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookd_deliveries_created_total",
		Help: "Deliveries written at ingest, by state: pending, or skipped (the subscription was disabled).",
	}, []string{"state"})
	f(created)
	m.createdPending = created.WithLabelValues("pending")
	m.createdSkipped = created.WithLabelValues("skipped")

	attempts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookd_attempts_total",
		Help: "Delivery attempts, by what each did to its delivery: delivered, retry (another attempt scheduled), fail (failed: a non-retryable answer or the retry schedule spent), gone (410: failed and the subscription disabled).",
	}, []string{"outcome"})
	f(attempts)
	for o := range numOutcomes {
		m.attempts[o] = attempts.WithLabelValues(o.String())
	}
	finished := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookd_deliveries_finished_total",
		Help: "Deliveries that reached a final state by an attempt, counted once the result is written to the store, by state (delivered, failed).",
	}, []string{"state"})
	f(finished)
	m.finishedOK = finished.WithLabelValues("delivered")
	m.finishedFailed = finished.WithLabelValues("failed")
	m.attemptDuration = histogram(f, "hookd_attempt_duration_seconds", "Duration of one delivery attempt (connect, send, read the answer head).", attemptBuckets)
	m.deliveryLag = histogram(f, "hookd_delivery_lag_seconds", "From an event's acceptance to the end of the attempt that delivered it, for deliveries delivered in their first round (replays excluded).", lagBuckets)
	m.deliveriesExpird = counter(f, "hookd_deliveries_expired_total", "Deliveries failed without an attempt because their retry window ran out while their host's circuit was open.")
	return m
}

func counter(register func(prometheus.Collector), name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	register(c)
	return c
}

func histogram(register func(prometheus.Collector), name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	register(h)
	return h
}

// Registry is the node's registry, for tests and extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text (or negotiated) format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Committed records one successful ingest group commit: how many events
// it wrote, how many requests were idempotent repeats, and how long it took.
func (m *Metrics) Committed(written, duplicates int, took time.Duration) {
	if m == nil {
		return
	}
	m.eventsAccepted.Add(float64(written))
	m.eventsDuplicate.Add(float64(duplicates))
	m.commitBatch.Observe(float64(written))
	m.commitSeconds.Observe(took.Seconds())
}

// DeliveriesCreated records deliveries written at ingest.
func (m *Metrics) DeliveriesCreated(pending, skipped int) {
	if m == nil {
		return
	}
	if pending > 0 {
		m.createdPending.Add(float64(pending))
	}
	if skipped > 0 {
		m.createdSkipped.Add(float64(skipped))
	}
}

// EventRejected records a POST /v1/events answered with an error whose API
// code is code; codes map onto the closed set of reasons.
func (m *Metrics) EventRejected(code string) {
	if m == nil {
		return
	}
	m.eventsRejected[ReasonFor(code)].Inc()
}

// ReasonFor maps an API error code to a rejection reason.
func ReasonFor(code string) string {
	switch code {
	case "invalid", "bad_request":
		return ReasonInvalid
	case "too_large":
		return ReasonTooLarge
	case "unauthorized", "forbidden":
		return ReasonUnauthorized
	case "not_found":
		return ReasonNotFound
	case "unavailable":
		return ReasonUnavailable
	case "ingest_rate_limited":
		return ReasonRateLimited
	case "storage_full":
		return ReasonFull
	}
	return ReasonInternal
}

// Attempt records one finished attempt.
func (m *Metrics) Attempt(o Outcome, took time.Duration) {
	if m == nil {
		return
	}
	m.attempts[o].Inc()
	m.attemptDuration.Observe(took.Seconds())
}

// Delivered records a delivery whose delivered state is now written.
func (m *Metrics) Delivered() {
	if m == nil {
		return
	}
	m.finishedOK.Inc()
}

// Failed records a delivery failed by an attempt, its state now written.
func (m *Metrics) Failed() {
	if m == nil {
		return
	}
	m.finishedFailed.Inc()
}

// Lag records a delivery's ingest-to-delivery lag (a clock step below zero
// counts as zero).
func (m *Metrics) Lag(d time.Duration) {
	if m == nil {
		return
	}
	m.deliveryLag.Observe(max(d, 0).Seconds())
}

// Expired records deliveries failed by the dispatcher's held-work expiry.
func (m *Metrics) Expired(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.deliveriesExpird.Add(float64(n))
}
