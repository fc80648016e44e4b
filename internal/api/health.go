package api

import (
	"net/http"
	"time"
)

type healthJSON struct {
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
	FailingSince           *time.Time `json:"failing_since"`
	LikelyConfigurationErr bool       `json:"likely_configuration_error"`
	ConfigurationErrorCode *int       `json:"configuration_error_status,omitempty"`
	// Shedding: new deliveries are written skipped (replayable), because the
	// backlog is over the threshold and not shrinking.
	Shedding      bool       `json:"shedding"`
	SheddingSince *time.Time `json:"shedding_since"`
}

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
	h := s.Dispatch.Health(sub.Host, sub.ID)
	out := healthJSON{
		State: string(sub.State), DisabledReason: sub.DisabledReason, Circuit: h.Circuit,
		EndpointCircuit: h.EndpointCircuit, HostCircuit: h.HostCircuit,
		SuccessRate: h.SuccessRate, Pending: st.Pending, Failed: st.Failed,
		LikelyConfigurationErr: h.ConfigError,
	}
	if !h.PausedUntil.IsZero() {
		t := h.PausedUntil.UTC()
		out.PausedUntil = &t
	}
	if !st.OldestPendingAt.IsZero() {
		out.LagSeconds = time.Since(st.OldestPendingAt).Seconds()
	}
	if !st.FailingSince.IsZero() {
		t := st.FailingSince.UTC()
		out.FailingSince = &t
	}
	if !st.OldestFailedAt.IsZero() {
		t := st.OldestFailedAt.UTC()
		out.OldestFailedAt = &t
	}
	if h.ConfigError {
		out.ConfigurationErrorCode = &h.ConfigCode
	}
	if s.Shed != nil {
		if since, on := s.Shed.Shedding(sub.ID); on {
			t := since.UTC()
			out.Shedding, out.SheddingSince = true, &t
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
