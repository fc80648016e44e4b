package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"hookd/internal/core"
	"hookd/internal/ingest"
)

type createEventRequest struct {
	Type           string         `json:"type"`
	Payload        jsontext.Value `json:"payload"`
	IdempotencyKey string         `json:"idempotency_key"`
	OrderingKey    string         `json:"ordering_key"`
	TenantID       string         `json:"tenant_id"`
}

func (s *Server) createEvent(w http.ResponseWriter, r *http.Request, p principal) error {
	var req createEventRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	ev := core.Event{Type: req.Type, Payload: req.Payload, IdempotencyKey: req.IdempotencyKey, OrderingKey: req.OrderingKey}
	if err := validateEvent(ev); err != nil {
		return err
	}
	tenant, err := s.tenantFor(r.Context(), p, req.TenantID)
	if err != nil {
		return err
	}
	ev.TenantID = tenant
	res, err := s.submitEvent(w, r, ev)
	if err != nil {
		return err
	}
	status := http.StatusAccepted
	if res.Duplicate {
		status = http.StatusOK
	}
	writeJSON(w, status, map[string]string{"id": res.EventID})
	return nil
}

// validateEvent checks what a client posts of an event, naming /v1's
// fields; both APIs post through it.
func validateEvent(ev core.Event) error {
	if err := core.ValidateEventType("type", ev.Type); err != nil {
		return err
	}
	if core.Reserved(ev.Type) {
		return errInvalid("type", "types starting with "+core.ReservedPrefix+" are hookd's own events and cannot be posted")
	}
	if len(ev.Payload) == 0 || bytes.Equal(ev.Payload, []byte("null")) {
		return errInvalid("payload", "is required")
	}
	if len(ev.Payload) > core.MaxPayloadBytes {
		return errTooLarge
	}
	if len(ev.IdempotencyKey) > 255 {
		return errInvalid("idempotency_key", "must be at most 255 characters")
	}
	// hookd's own events are made once by their key; a tenant's event
	// under one would keep hookd's from being written.
	if strings.HasPrefix(ev.IdempotencyKey, core.ReservedPrefix) {
		return errInvalid("idempotency_key", "keys starting with "+core.ReservedPrefix+" are hookd's own events' and cannot be posted")
	}
	if len(ev.OrderingKey) > 255 {
		return errInvalid("ordering_key", "must be at most 255 characters")
	}
	return nil
}

// submitEvent takes a token from the event's tenant's ingest rate and
// writes the event (validated, tenant resolved): the one way a client's
// event comes in.
func (s *Server) submitEvent(w http.ResponseWriter, r *http.Request, ev core.Event) (ingest.Result, error) {
	if err := s.limitIngest(ev.TenantID); err != nil {
		return ingest.Result{}, err
	}
	return s.Ingest.Submit(r.Context(), ev)
}

type eventJSON struct {
	ID             string            `json:"id"`
	TenantID       string            `json:"tenant_id"`
	Type           string            `json:"type"`
	Payload        json.RawMessage   `json:"payload"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	OrderingKey    string            `json:"ordering_key,omitempty"`
	CreatedAt      time.Time         `json:"created_at"`
	Deliveries     []eventDeliveryJS `json:"deliveries"`
}

type eventDeliveryJS struct {
	ID             string     `json:"id"`
	SubscriptionID string     `json:"subscription_id"`
	State          string     `json:"state"`
	AttemptCount   int        `json:"attempt_count"`
	NextAttemptAt  *time.Time `json:"next_attempt_at"`
	LastStatus     *int       `json:"last_status"`
}

func (s *Server) getEvent(w http.ResponseWriter, r *http.Request, p principal) error {
	ev, dls, err := s.Store.EventGet(r.Context(), p.scope(), r.PathValue("id"))
	if err != nil {
		return err
	}
	out := eventJSON{
		ID: ev.ID, TenantID: ev.TenantID, Type: ev.Type, Payload: ev.Payload,
		IdempotencyKey: ev.IdempotencyKey, OrderingKey: ev.OrderingKey, CreatedAt: ev.CreatedAt,
		Deliveries: make([]eventDeliveryJS, len(dls)),
	}
	for i, d := range dls {
		out.Deliveries[i] = eventDeliveryJS{
			ID: d.ID, SubscriptionID: d.SubscriptionID, State: string(d.State),
			AttemptCount: d.AttemptCount, NextAttemptAt: nextAttempt(d), LastStatus: lastStatus(d),
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// nextAttempt is shown only while a delivery is pending.
func nextAttempt(d core.Delivery) *time.Time {
	if d.State != core.DeliveryPending {
		return nil
	}
	t := d.NextAttemptAt.UTC()
	return &t
}

func lastStatus(d core.Delivery) *int {
	if d.LastStatus == 0 {
		return nil
	}
	v := d.LastStatus
	return &v
}
