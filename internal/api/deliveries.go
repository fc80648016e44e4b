package api

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"hookd/internal/audit"
	"hookd/internal/core"
	"hookd/internal/send"
	"hookd/internal/store"
	"hookd/webhook"
)

type deliveryJSON struct {
	ID             string     `json:"id"`
	EventID        string     `json:"event_id"`
	SubscriptionID string     `json:"subscription_id"`
	EventType      string     `json:"event_type"`
	State          string     `json:"state"`
	AttemptCount   int        `json:"attempt_count"`
	NextAttemptAt  *time.Time `json:"next_attempt_at"`
	LastStatus     *int       `json:"last_status"`
	LastError      string     `json:"last_error,omitempty"`
	Sequence       int64      `json:"sequence,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
}

// deliveryDetailJSON is one delivery with every attempt (an empty list
// before the first), and what is sent: the request as its last attempt
// (or its first) carries it.
type deliveryDetailJSON struct {
	deliveryJSON
	// RoundStart counts the attempts made before the current round (the
	// last replay's); ReplayedAt is that replay's time, null if none.
	RoundStart int           `json:"round_start"`
	ReplayedAt *time.Time    `json:"replayed_at"`
	Request    requestJSON   `json:"request"`
	Attempts   []attemptJSON `json:"attempts"`
}

type attemptJSON struct {
	N               int               `json:"n"`
	StartedAt       time.Time         `json:"started_at"`
	DurationMS      int64             `json:"duration_ms"`
	StatusCode      *int              `json:"status_code"`
	Error           string            `json:"error"`
	Response        string            `json:"response"`
	ResponseHeaders map[string]string `json:"response_headers"`
}

// requestJSON is what hookd sends for a delivery: the headers (signatures
// cut to their first characters: enough to match a receiver's log, never
// a usable signature; endpoint header values redacted) and the body.
type requestJSON struct {
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// shownSignature is how much of a signature the request shows.
const shownSignature = len("v1,") + 8

func toDeliveryJSON(d core.Delivery) deliveryJSON {
	return deliveryJSON{
		ID: d.ID, EventID: d.EventID, SubscriptionID: d.SubscriptionID, EventType: d.EventType,
		State: string(d.State), AttemptCount: d.AttemptCount, NextAttemptAt: nextAttempt(d),
		LastStatus: lastStatus(d), LastError: d.LastError, Sequence: d.Sequence,
		CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt,
	}
}

func (s *Server) getDelivery(w http.ResponseWriter, r *http.Request, p principal) error {
	d, attempts, err := s.Store.DeliveryGet(r.Context(), p.scope(), r.PathValue("id"))
	if err != nil {
		return err
	}
	ev, _, err := s.Store.EventGet(r.Context(), p.scope(), d.EventID)
	if err != nil {
		return err
	}
	out := deliveryDetailJSON{deliveryJSON: toDeliveryJSON(d), RoundStart: d.RoundStart, Attempts: make([]attemptJSON, len(attempts))}
	if d.RoundStartedAt.After(d.CreatedAt) {
		out.ReplayedAt = optTime(d.RoundStartedAt)
	}
	for i, a := range attempts {
		var code *int
		if a.StatusCode != 0 {
			c := a.StatusCode
			code = &c
		}
		out.Attempts[i] = attemptJSON{N: a.N, StartedAt: a.StartedAt, DurationMS: a.Duration.Milliseconds(),
			StatusCode: code, Error: a.Error, Response: a.Response, ResponseHeaders: headerMap(a.ResponseHeaders)}
	}
	signedAt := time.Now()
	if len(attempts) > 0 {
		signedAt = attempts[len(attempts)-1].StartedAt
	}
	// A deleted subscription signs nothing more: its request shows no signature.
	sub, err := s.Store.SubscriptionGet(r.Context(), "", d.SubscriptionID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	out.Request = s.request(sub, &core.Job{Delivery: d, Event: ev}, signedAt)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// request rebuilds what hookd sends for job at signedAt: the headers
// send.Sender sets, in lower case as the Standard Webhooks spec writes
// them, and the endpoint's own, redacted.
func (s *Server) request(sub core.Subscription, job *core.Job, signedAt time.Time) requestJSON {
	body := send.Body(&sub, job)
	h := map[string]string{
		"webhook-id":        job.Event.ID,
		"webhook-timestamp": strconv.FormatInt(signedAt.Unix(), 10),
		"content-type":      "application/json",
		"user-agent":        "hookd/" + s.Version,
	}
	var sigs []string
	if sub.ID != "" {
		for _, secret := range sub.Secrets(signedAt) {
			if sig, err := webhook.Sign(secret, job.Event.ID, signedAt, body); err == nil && len(sig) > shownSignature {
				sigs = append(sigs, sig[:shownSignature]+"…")
			}
		}
	}
	h["webhook-signature"] = strings.Join(sigs, " ")
	if sub.SvixHeaders {
		h["svix-id"], h["svix-timestamp"], h["svix-signature"] = h["webhook-id"], h["webhook-timestamp"], h["webhook-signature"]
	}
	for name := range sub.Headers {
		h[name] = Redacted
	}
	return requestJSON{Headers: h, Body: string(body)}
}

// headerMap reads headers as send writes them, one "Name: value" a line.
func headerMap(text string) map[string]string {
	h := map[string]string{}
	for line := range strings.Lines(text) {
		if name, value, ok := strings.Cut(strings.TrimSuffix(line, "\n"), ": "); ok {
			h[name] = value
		}
	}
	return h
}

func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	cursor, err := idCursor(q, "dlv")
	if err != nil {
		return err
	}
	params := store.DeliveryListParams{TenantID: p.scope(), SubscriptionID: r.PathValue("id"), Cursor: cursor}
	if params.Limit, err = parseLimit(q.Get("limit")); err != nil {
		return err
	}
	switch st := core.DeliveryState(q.Get("state")); st {
	case "", core.DeliveryPending, core.DeliveryDelivered, core.DeliveryFailed, core.DeliverySkipped:
		params.State = st
	default:
		return errBadRequest("state", "must be pending, delivered, failed or skipped")
	}
	if et := q.Get("event_type"); et != "" {
		if err := core.ValidateEventType("event_type", et); err != nil {
			return errBadRequest("event_type", "must be an event type like payment.succeeded")
		}
		params.EventType = et
	}
	if params.Since, params.Until, err = timeRangeOf(q); err != nil {
		return err
	}
	// A subscription of another tenant must look absent, even with no deliveries.
	if _, err := s.Store.SubscriptionGet(r.Context(), p.scope(), params.SubscriptionID); err != nil {
		return err
	}
	page, err := s.Store.DeliveryList(r.Context(), params)
	if err != nil {
		return err
	}
	writePage(w, page, toDeliveryJSON)
	return nil
}

// queryTime reads an optional time query parameter.
func queryTime(q map[string][]string, name string) (time.Time, error) {
	if vs := q[name]; len(vs) > 0 && vs[0] != "" {
		return parseTime(name, vs[0], errBadRequest)
	}
	return time.Time{}, nil
}

// replayDelivery sends a delivery again: same webhook-id, signed afresh,
// through its subscription's queue and admission like any other.
func (s *Server) replayDelivery(w http.ResponseWriter, r *http.Request, p principal) error {
	if err := noBody(w, r); err != nil {
		return err
	}
	id := r.PathValue("id")
	d, err := s.Store.DeliveryReplay(audit.Record(r.Context(), audit.ReplayDelivery, id, nil), p.scope(), id, time.Now().UTC())
	if errors.Is(err, store.ErrDisabled) {
		return errReplayDisabled
	}
	if errors.Is(err, store.ErrConflict) {
		return &apiError{Status: http.StatusConflict, Code: "conflict",
			Message: "delivery is already pending, or its subscription was deleted"}
	}
	if err != nil {
		return err
	}
	s.Dispatch.Wake(d.Host, d.SubscriptionID)
	writeJSON(w, http.StatusAccepted, toDeliveryJSON(d))
	return nil
}
