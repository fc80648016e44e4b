package api

import (
	"net/http"
	"time"

	"hookd/internal/core"
	"hookd/internal/dispatch"
	"hookd/internal/send"
	"hookd/internal/store"
)

type healthJSON struct {
	// Status is the one word a person reads first: healthy, failing,
	// held, paused, disabled or shed (see healthStatus).
	Status          string     `json:"status"`
	State           string     `json:"state"`
	DisabledReason  string     `json:"disabled_reason"`
	Circuit         string     `json:"circuit"`
	EndpointCircuit string     `json:"endpoint_circuit"`
	HostCircuit     string     `json:"host_circuit"`
	PausedUntil     *time.Time `json:"paused_until"`
	SuccessRate     *float64   `json:"success_rate"`
	Pending         int        `json:"pending"`
	LagSeconds      float64    `json:"lag_seconds"`
	Failed          int        `json:"failed"`
	OldestFailedAt  *time.Time `json:"oldest_failed_at"`
	// FailingSince: every attempt since has failed (null: the last one
	// succeeded). --disable-after of it disables the subscription.
	FailingSince *time.Time `json:"failing_since"`
	// LastFailure is the last failed attempt, kept after a success.
	LastFailure *failureJSON `json:"last_failure"`
	// NextAttemptAt is when the next attempt is due, holds included;
	// HeldBy says what holds it past its schedule, until HeldUntil.
	NextAttemptAt          *time.Time `json:"next_attempt_at"`
	HeldBy                 *string    `json:"held_by"`
	HeldUntil              *time.Time `json:"held_until"`
	LikelyConfigurationErr bool       `json:"likely_configuration_error"`
	ConfigurationErrorCode *int       `json:"configuration_error_status,omitempty"`
	// Shedding: new deliveries are written skipped (replayable), because the
	// backlog is over the threshold and not shrinking.
	Shedding      bool       `json:"shedding"`
	SheddingSince *time.Time `json:"shedding_since"`
	// RecentAttempts counts this node's attempts of the last hour by minute.
	RecentAttempts []minuteJSON `json:"recent_attempts"`
}

type failureJSON struct {
	At       time.Time `json:"at"`
	Status   *int      `json:"status"`
	Class    string    `json:"class"`
	Error    string    `json:"error"`
	Response string    `json:"response"`
}

type minuteJSON struct {
	Start     time.Time `json:"start"`
	Delivered int       `json:"delivered"`
	Failed    int       `json:"failed"`
}

// What holds an endpoint's next attempt past its schedule (held_by).
const (
	heldPaused          = "paused"           // the subscription is paused
	heldDisabled        = "disabled"         // nothing is sent
	heldEndpointCircuit = "endpoint_circuit" // its own circuit is open (or probing)
	heldHostCircuit     = "host_circuit"     // its host's circuit is open (or probing)
	heldRetryAfter      = "retry_after"      // the endpoint (or its host) asked to wait
	heldRecovering      = "recovery_ramp"    // sent, but paced, after its circuit (or its host's) closed
)

// subscriptionHealth tells a customer whether their endpoint is keeping up,
// and when it is not, why: what holds it back (its own circuit, its host's,
// a Retry-After pause), recent success, backlog and lag, failures, and a
// hint when the failures look like a configuration error.
func (s *Server) subscriptionHealth(w http.ResponseWriter, r *http.Request, p principal) error {
	sub, err := s.Store.SubscriptionGet(r.Context(), p.scope(), r.PathValue("id"))
	if err != nil {
		return err
	}
	st, err := s.Store.DeliveryStats(r.Context(), p.scope(), sub.ID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.health(sub, st, time.Now()))
	return nil
}

// health puts together what the store and the dispatcher know of sub.
func (s *Server) health(sub core.Subscription, st store.DeliveryStats, now time.Time) healthJSON {
	h := s.Dispatch.Health(sub.Host, sub.ID)
	out := healthJSON{
		State: string(sub.State), DisabledReason: sub.DisabledReason, Circuit: h.Circuit,
		EndpointCircuit: h.EndpointCircuit, HostCircuit: h.HostCircuit,
		SuccessRate: h.SuccessRate, Pending: st.Pending, Failed: st.Failed,
		LikelyConfigurationErr: h.ConfigError, PausedUntil: optTime(h.PausedUntil),
		FailingSince: optTime(st.FailingSince), OldestFailedAt: optTime(st.OldestFailedAt),
		RecentAttempts: make([]minuteJSON, len(h.Minutes)),
	}
	for i, m := range h.Minutes {
		out.RecentAttempts[i] = minuteJSON{Start: m.Start.UTC(), Delivered: m.Delivered, Failed: m.Failed}
	}
	if !st.OldestPendingAt.IsZero() {
		out.LagSeconds = now.Sub(st.OldestPendingAt).Seconds()
	}
	if f := st.LastFailure; !f.At.IsZero() {
		out.LastFailure = &failureJSON{At: f.At.UTC(), Class: send.FailureClass(f.Status, f.Error), Error: f.Error, Response: f.Response}
		if f.Status != 0 {
			out.LastFailure.Status = &f.Status
		}
	}
	if h.ConfigError {
		out.ConfigurationErrorCode = &h.ConfigCode
	}
	if s.Shed != nil {
		if since, on := s.Shed.Shedding(sub.ID); on {
			out.Shedding, out.SheddingSince = true, optTime(since)
		}
	}
	held, until := holds(sub, h, st.Pending, now)
	if held != "" {
		out.HeldBy, out.HeldUntil = &held, optTime(until)
	}
	if st.Pending > 0 && sub.State == core.SubActive {
		next := st.NextAttemptAt
		if until.After(next) && held != heldRecovering { // a ramp paces work, it does not stop it
			next = until
		}
		out.NextAttemptAt = optTime(next)
	}
	out.Status = healthStatus(sub, out)
	return out
}

// holds names what keeps sub from its schedule, and until when (zero: not
// known, e.g. a probe in flight, or for as long as the state lasts). Of
// several holds the one ending last is named: it is the one that decides.
// A recovery ramp holds a backlog back only while one is pending, and
// only when nothing else does: a health that said healthy through it
// showed an outside run 10,850 pending, 601 s behind, with no reason.
func holds(sub core.Subscription, h dispatch.Health, pending int, now time.Time) (string, time.Time) {
	switch sub.State {
	case core.SubPaused:
		return heldPaused, time.Time{}
	case core.SubDisabled:
		return heldDisabled, time.Time{}
	}
	held, until := "", time.Time{}
	hold := func(on bool, by string, at time.Time) {
		if on && (held == "" || at.After(until)) {
			held, until = by, at
		}
	}
	hold(h.HostCircuit != "closed", heldHostCircuit, h.HostRetryAt)
	hold(h.EndpointCircuit != "closed", heldEndpointCircuit, h.EndpointRetryAt)
	hold(h.PausedUntil.After(now), heldRetryAfter, h.PausedUntil)
	if held == "" && h.Recovering && pending > 0 {
		held, until = heldRecovering, h.RampEndsAt
	}
	return held, until
}

// healthStatus is the one word for an endpoint, most telling first: what
// its owner chose or hookd decided (disabled, paused, shed), then failing
// (every attempt since failing_since failed), then held (not failing
// itself, but its host's circuit or a Retry-After holds it), else healthy.
func healthStatus(sub core.Subscription, h healthJSON) string {
	switch {
	case sub.State == core.SubDisabled:
		return "disabled"
	case sub.State == core.SubPaused:
		return "paused"
	case h.Shedding:
		return "shed"
	case h.FailingSince != nil:
		return "failing"
	case h.HeldBy != nil:
		return "held"
	}
	return "healthy"
}

// listFailing pages the subscriptions failing now, each with its health:
// a tenant key its own tenant's, the admin every tenant's (or tenant_id's),
// so an operator sees every broken endpoint in one place.
func (s *Server) listFailing(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	cursor, err := idCursor(q, "sub")
	if err != nil {
		return err
	}
	params := store.SubscriptionListParams{Cursor: cursor, Failing: true}
	if params.Limit, err = parseLimit(q.Get("limit")); err != nil {
		return err
	}
	if t := q.Get("tenant_id"); t != "" || !p.admin {
		if params.TenantID, err = s.tenantFor(r.Context(), p, t); err != nil {
			return err
		}
	}
	page, err := s.Store.SubscriptionList(r.Context(), params)
	if err != nil {
		return err
	}
	return s.writeSubscriptions(w, r, page, true)
}

// optTime is t in UTC, or nil (JSON null) when zero.
func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
