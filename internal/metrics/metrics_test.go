package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Two nodes in one process each have their own registry: no duplicate
// registration panic, no shared counts.
func TestNodesDoNotShareMetrics(t *testing.T) {
	a, b := New(), New()
	a.Committed(2, 1, time.Millisecond)
	if got := testutil.ToFloat64(a.eventsAccepted); got != 2 {
		t.Errorf("a accepted = %v, want 2", got)
	}
	if got := testutil.ToFloat64(b.eventsAccepted); got != 0 {
		t.Errorf("b accepted = %v, want 0", got)
	}
}

func TestNilMetricsDoNothing(t *testing.T) {
	var m *Metrics
	m.Committed(1, 0, time.Millisecond)
	m.DeliveriesCreated(1, 1)
	m.EventRejected("invalid")
	m.Attempt(OutcomeDelivered, time.Millisecond)
	m.Delivered()
	m.Failed()
	m.Lag(time.Second)
	m.Expired(3)
	m.WatchDispatcher(func() DispatchStats { return DispatchStats{} })
}

func TestRejectionReasonsAreAClosedSet(t *testing.T) {
	for code, want := range map[string]string{
		"invalid": "invalid", "bad_request": "invalid", "too_large": "too_large",
		"unauthorized": "unauthorized", "forbidden": "unauthorized", "not_found": "not_found",
		"unavailable": "unavailable", "internal": "internal", "conflict": "internal", "": "internal",
		"ingest_rate_limited": "rate_limited", "storage_full": "full",
	} {
		if got := ReasonFor(code); got != want {
			t.Errorf("ReasonFor(%q) = %q, want %q", code, got, want)
		}
	}
}

func TestExposition(t *testing.T) {
	m := New()
	m.EventRejected("bad_request")
	m.Attempt(OutcomeGone, 20*time.Millisecond)
	m.Failed()
	m.Lag(-time.Second) // a clock step: counted as zero
	m.Expired(2)
	m.WatchDispatcher(func() DispatchStats {
		return DispatchStats{Hosts: 3, Lanes: 4, Window: 5, Inflight: 6, BreakersOpen: 1, EndpointBreakersOpen: 7,
			RateLimited: 2, HostsPaused: 8, EndpointsPaused: 9}
	})
	want := `
# HELP hookd_attempts_total Delivery attempts, by what each did to its delivery: delivered, retry (another attempt scheduled), fail (failed: a non-retryable answer or the retry schedule spent), gone (410: failed and the subscription disabled).
# TYPE hookd_attempts_total counter
hookd_attempts_total{outcome="delivered"} 0
hookd_attempts_total{outcome="fail"} 0
hookd_attempts_total{outcome="gone"} 1
hookd_attempts_total{outcome="retry"} 0
# HELP hookd_breakers_open Destination hosts whose own circuit breaker is open or half-open (host-wide failures).
# TYPE hookd_breakers_open gauge
hookd_breakers_open 1
# HELP hookd_deliveries_expired_total Deliveries failed without an attempt because their retry window ran out while their host's circuit was open.
# TYPE hookd_deliveries_expired_total counter
hookd_deliveries_expired_total 2
# HELP hookd_deliveries_finished_total Deliveries that reached a final state by an attempt, counted once the result is written to the store, by state (delivered, failed).
# TYPE hookd_deliveries_finished_total counter
hookd_deliveries_finished_total{state="delivered"} 0
hookd_deliveries_finished_total{state="failed"} 1
# HELP hookd_dispatch_hosts Destination hosts the dispatcher holds in memory.
# TYPE hookd_dispatch_hosts gauge
hookd_dispatch_hosts 3
# HELP hookd_dispatch_inflight Delivery attempts in flight.
# TYPE hookd_dispatch_inflight gauge
hookd_dispatch_inflight 6
# HELP hookd_dispatch_lanes Per-subscription lanes the dispatcher holds in memory.
# TYPE hookd_dispatch_lanes gauge
hookd_dispatch_lanes 4
# HELP hookd_dispatch_window_deliveries Deliveries queued in memory (the bounded windows), not yet started.
# TYPE hookd_dispatch_window_deliveries gauge
hookd_dispatch_window_deliveries 5
# HELP hookd_endpoint_breakers_open Endpoints (subscriptions) whose own circuit breaker is open or half-open.
# TYPE hookd_endpoint_breakers_open gauge
hookd_endpoint_breakers_open 7
# HELP hookd_endpoints_paused Endpoints held by a Retry-After of their own.
# TYPE hookd_endpoints_paused gauge
hookd_endpoints_paused 9
# HELP hookd_endpoints_rate_limited Endpoints sent at a reduced rate after answering 429.
# TYPE hookd_endpoints_rate_limited gauge
hookd_endpoints_rate_limited 2
# HELP hookd_events_rejected_total POST /v1/events answered with an error, by reason.
# TYPE hookd_events_rejected_total counter
hookd_events_rejected_total{reason="full"} 0
hookd_events_rejected_total{reason="internal"} 0
hookd_events_rejected_total{reason="invalid"} 1
hookd_events_rejected_total{reason="not_found"} 0
hookd_events_rejected_total{reason="rate_limited"} 0
hookd_events_rejected_total{reason="too_large"} 0
hookd_events_rejected_total{reason="unauthorized"} 0
hookd_events_rejected_total{reason="unavailable"} 0
# HELP hookd_hosts_paused Destination hosts held by a Retry-After given to two or more of their endpoints within a minute.
# TYPE hookd_hosts_paused gauge
hookd_hosts_paused 8
`
	names := []string{"hookd_attempts_total", "hookd_breakers_open", "hookd_deliveries_expired_total",
		"hookd_deliveries_finished_total", "hookd_dispatch_hosts", "hookd_dispatch_inflight",
		"hookd_dispatch_lanes", "hookd_dispatch_window_deliveries", "hookd_events_rejected_total",
		"hookd_endpoint_breakers_open", "hookd_endpoints_paused", "hookd_endpoints_rate_limited", "hookd_hosts_paused"}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.deliveryLag); n != 1 {
		t.Errorf("lag series = %d, want 1", n)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `hookd_delivery_lag_seconds_bucket{le="0.005"} 1`) {
		t.Errorf("handler: %d\n%s", rec.Code, rec.Body.String())
	}
}
