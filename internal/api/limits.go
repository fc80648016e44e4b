package api

import (
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"
)

// Limits bound what one tenant may ask of a node. Each over its line
// answers a clear error and writes nothing. Zero values are no limit.
type Limits struct {
	// IngestRate is the events per second one tenant may post to this node
	// (with several nodes behind a balancer, each node allows it), and
	// IngestBurst how many it may post at once above that.
	IngestRate  float64
	IngestBurst int
	// MaxSubscriptions is how many live subscriptions a tenant may have,
	// on every node together (the store counts them).
	MaxSubscriptions int
}

// Defaults hookd serve starts with. A node commits about 5,000 events/s
// (docs/bench.md), so a tenant at its rate takes a fifth of it, and a
// burst of two seconds' worth absorbs a client's retries after a blip.
const (
	DefaultIngestRate       = 1000
	DefaultIngestBurst      = 2000
	DefaultMaxSubscriptions = 1000
)

// buckets is one token bucket per tenant: refilled at rate per second up
// to burst, one token per event. All under one mutex: a take is a few
// arithmetic operations, far below an event's other costs.
type buckets struct {
	rate, burst float64
	now         func() time.Time

	mu sync.Mutex
	m  map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newBuckets(rate float64, burst int, now func() time.Time) *buckets {
	return &buckets{rate: rate, burst: math.Max(float64(burst), 1), now: now, m: map[string]*bucket{}}
}

// take spends one of key's tokens; if there is none, it says how long
// until there is one, and spends nothing.
func (b *buckets) take(key string) (time.Duration, bool) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.m[key]
	if k == nil {
		k = &bucket{tokens: b.burst, at: now}
		b.m[key] = k
	}
	if now.After(k.at) {
		k.tokens = math.Min(b.burst, k.tokens+now.Sub(k.at).Seconds()*b.rate)
		k.at = now
	}
	if k.tokens >= 1 {
		k.tokens--
		return 0, true
	}
	return time.Duration((1 - k.tokens) / b.rate * float64(time.Second)), false
}

// limitIngest answers 429 with Retry-After (whole seconds, at least one)
// if tenant is over its ingest rate.
func (s *Server) limitIngest(tenant string) error {
	if s.ingestRate == nil {
		return nil
	}
	wait, ok := s.ingestRate.take(tenant)
	if ok {
		return nil
	}
	secs := max(1, int(math.Ceil(wait.Seconds())))
	return &apiError{Status: http.StatusTooManyRequests, Code: "ingest_rate_limited", RetryAfter: secs,
		Message: fmt.Sprintf("tenant %s is over its ingest rate of %g events/s (bursts of %d) on this node; retry after %ds",
			tenant, s.Limits.IngestRate, s.Limits.IngestBurst, secs)}
}

// errSubscriptionLimit: the tenant has as many live subscriptions as it
// may; nothing was created.
func errSubscriptionLimit(tenant string, max int) *apiError {
	return &apiError{Status: http.StatusUnprocessableEntity, Code: "subscription_limit",
		Message: fmt.Sprintf("tenant %s has %d subscriptions, the most it may have; delete one first", tenant, max)}
}

// replayRetryAfter is the Retry-After of a replay refused while another
// runs: a poll interval, not a promise (a job may run for an hour; its
// progress is at GET /v1/replays/{job_id}).
const replayRetryAfter = 30

// errReplayRunning: the subscription has a bulk replay running (jobID,
// "" if it finished since the refusal); one runs per subscription at a
// time. The client can watch it and ask again once it is done.
func errReplayRunning(jobID string) *apiError {
	msg := "a bulk replay of this subscription is running, and one runs per subscription at a time: retry after Retry-After seconds"
	if jobID != "" {
		msg += ", once GET /v1/replays/" + jobID + " says done, or cancel it (POST /v1/replays/" + jobID + "/cancel)"
	}
	return &apiError{Status: http.StatusTooManyRequests, Code: "replay_running", JobID: jobID, RetryAfter: replayRetryAfter,
		Message: msg}
}
