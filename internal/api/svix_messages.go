package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"hookd/internal/audit"
	"hookd/internal/core"
	"hookd/internal/store"
)

// A message is an event; its attempts are its deliveries' attempts.

type svixMessageJSON struct {
	ID        string          `json:"id"`
	EventType string          `json:"eventType"`
	EventID   *string         `json:"eventId"`
	Payload   json.RawMessage `json:"payload"`
	Timestamp time.Time       `json:"timestamp"`
}

// toSvixMessage shows ev; without content its payload is {}.
func toSvixMessage(ev core.Event, content bool) svixMessageJSON {
	payload := json.RawMessage(ev.Payload)
	if !content {
		payload = json.RawMessage(`{}`)
	}
	var eventID *string
	if !strings.HasPrefix(ev.IdempotencyKey, svixRequestKey) {
		eventID = nullIfEmpty(ev.IdempotencyKey)
	}
	return svixMessageJSON{ID: msgID(ev.ID), EventType: ev.Type, EventID: eventID, Payload: payload, Timestamp: ev.CreatedAt}
}

// svixRequestKey prefixes an idempotency-key header's value in the
// event's idempotency key: the header names a request, eventId a message,
// and one must not answer for the other. Clients cannot post keys under
// hookd.'s prefix, so neither can meet it.
const svixRequestKey = core.ReservedPrefix + "svix.idempotency-key:"

// withContent reads with_content (default true).
func withContent(r *http.Request) bool { return r.URL.Query().Get("with_content") != "false" }

type svixMessageIn struct {
	EventType   string         `json:"eventType"`
	Payload     jsontext.Value `json:"payload"`
	EventID     *string        `json:"eventId"`
	Channels    jsontext.Value `json:"channels"`
	Application jsontext.Value `json:"application"`
	// DeliverAt (a scheduled message) is refused: taken silently, the
	// message would go out at once.
	DeliverAt jsontext.Value `json:"deliverAt"`
	// Taken, not kept (docs/svix.md), but of their type, as Svix checks.
	Tags                   *[]string `json:"tags"`
	PayloadRetentionPeriod *int64    `json:"payloadRetentionPeriod"`
	PayloadRetentionHours  *int64    `json:"payloadRetentionHours"`
}

// svixCreateMessage posts an event. eventId, or else the idempotency-key
// header, is its idempotency key: the same again writes nothing and
// answers the first message, 202 for a repeated header (Svix answers a
// repeat with its first answer) and 200 for a repeated eventId (/v1's
// answer; Svix's server answers 409 there, without the message).
func (s *Server) svixCreateMessage(w http.ResponseWriter, r *http.Request, p principal) error {
	var in svixMessageIn
	if err := svixDecode(w, r, &in); err != nil {
		return err
	}
	if len(in.Application) > 0 && string(in.Application) != "null" {
		return errNotImplemented("creating the application with a message (create it with POST /api/v1/app first)")
	}
	var channels []string
	if _, _, err := optional("channels", in.Channels, &channels); err != nil {
		return err
	} else if len(channels) > 0 {
		return errNotImplemented("channels")
	}
	if len(in.DeliverAt) > 0 && string(in.DeliverAt) != "null" {
		return errNotImplemented("deliverAt (scheduled messages)")
	}
	if k := in.Payload.Kind(); k != 0 && k != '{' && k != 'n' {
		return errInvalid("payload", "must be a JSON object, as on Svix") // /v1 takes any JSON value
	}
	ev := core.Event{Type: in.EventType, Payload: in.Payload}
	if in.EventID != nil {
		ev.IdempotencyKey = *in.EventID
	}
	if err := validateEvent(ev); err != nil {
		return err
	}
	if h := r.Header.Get("Idempotency-Key"); h != "" && in.EventID == nil {
		if len(h) > 255 {
			return errInvalid("idempotency-key", "must be at most 255 characters")
		}
		ev.IdempotencyKey = svixRequestKey + h
	}
	app, err := s.svixApp(r.Context(), p, r.PathValue("app_id"))
	if err != nil {
		return err
	}
	ev.TenantID = app.ID
	res, err := s.submitEvent(w, r, ev)
	if err != nil {
		return err
	}
	// Committed: read back what was written (a repeat's first message).
	stored, _, err := s.Store.EventGet(r.Context(), app.ID, res.EventID)
	if err != nil {
		return err
	}
	status := http.StatusAccepted
	if res.Duplicate && in.EventID != nil {
		status = http.StatusOK
	}
	writeJSON(w, status, toSvixMessage(stored, withContent(r)))
	return nil
}

func (s *Server) svixListMessages(w http.ResponseWriter, r *http.Request, p principal) error {
	if err := svixUnfiltered(r, "channel", "tag"); err != nil {
		return err
	}
	limit, iter, err := svixList(r)
	if err != nil {
		return err
	}
	if iter != "" {
		if _, _, err := store.ParseTimeCursor(iter, 1); err != nil {
			return errQuery("iterator", "not an iterator this list gave")
		}
	}
	params := store.EventListParams{Cursor: iter, Limit: limit, Types: svixQueryList(r, "event_types"), WithPayload: withContent(r)}
	if params.Since, err = svixQueryTime(r, "after"); err != nil {
		return err
	}
	if params.Until, err = svixQueryTime(r, "before"); err != nil {
		return err
	}
	app, err := s.svixApp(r.Context(), p, r.PathValue("app_id"))
	if err != nil {
		return err
	}
	params.TenantID = app.ID
	page, err := s.Store.EventList(r.Context(), params)
	if err != nil {
		return err
	}
	content := withContent(r)
	svixPage(w, page, limit, func(ev core.Event) svixMessageJSON { return toSvixMessage(ev, content) })
	return nil
}

// svixMessage resolves {app_id} and {msg_id} (msg_ or evt_) of r, with
// the event's deliveries.
func (s *Server) svixMessage(r *http.Request, p principal) (core.Tenant, core.Event, []core.Delivery, error) {
	app, err := s.svixApp(r.Context(), p, r.PathValue("app_id"))
	if err != nil {
		return core.Tenant{}, core.Event{}, nil, err
	}
	ev, ds, err := s.Store.EventGet(r.Context(), app.ID, eventID(r.PathValue("msg_id")))
	return app, ev, ds, err
}

func (s *Server) svixGetMessage(w http.ResponseWriter, r *http.Request, p principal) error {
	_, ev, _, err := s.svixMessage(r, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSvixMessage(ev, withContent(r)))
	return nil
}

// svixStatus is Svix's status of a delivery: 0 success, 1 pending, 2 fail
// (skipped: never sent, replayable, is a failure there).
func svixStatus(st core.DeliveryState) int {
	switch st {
	case core.DeliveryDelivered:
		return 0
	case core.DeliveryPending:
		return 1
	}
	return 2
}

// svixStatusText is Svix's name of a status (statusText, which its
// clients read beside status).
func svixStatusText(status int) string {
	return [...]string{"success", "pending", "fail", "sending"}[status]
}

// svixAttemptStatus is Svix's status of one finished attempt: a 2xx is a
// success (0), anything else a failure (2).
func svixAttemptStatus(a core.Attempt) int {
	if a.StatusCode >= 200 && a.StatusCode < 300 {
		return 0
	}
	return 2
}

type svixAttemptJSON struct {
	ID                 string           `json:"id"`
	MsgID              string           `json:"msgId"`
	EndpointID         string           `json:"endpointId"`
	URL                string           `json:"url"`
	Response           string           `json:"response"`
	ResponseStatusCode int              `json:"responseStatusCode"`
	ResponseDurationMs int64            `json:"responseDurationMs"`
	Status             int              `json:"status"`
	StatusText         string           `json:"statusText"`
	TriggerType        int              `json:"triggerType"`
	Timestamp          time.Time        `json:"timestamp"`
	Msg                *svixMessageJSON `json:"msg,omitempty"`
}

// attemptViews makes Svix attempts, reading each subscription's URL (and,
// with msgs, each event) once.
type attemptViews struct {
	s      *Server
	ctx    context.Context
	tenant string
	urls   map[string]string
	msgs   map[string]*svixMessageJSON // nil: not asked for
}

func (v *attemptViews) url(subID string) string {
	u, ok := v.urls[subID]
	if !ok {
		if sub, err := v.s.Store.SubscriptionGet(v.ctx, v.tenant, subID); err == nil {
			u = redactURL(sub.URL)
		}
		v.urls[subID] = u // a deleted endpoint's URL is not kept: ""
	}
	return u
}

func (v *attemptViews) json(row store.AttemptRow) svixAttemptJSON {
	a, d := row.Attempt, row.Delivery
	resp := a.Response
	if a.StatusCode == 0 {
		resp = a.Error
	}
	out := svixAttemptJSON{ID: attemptID(a), MsgID: msgID(d.EventID), EndpointID: epID(d.SubscriptionID),
		URL: v.url(d.SubscriptionID), Response: resp, ResponseStatusCode: a.StatusCode,
		ResponseDurationMs: a.Duration.Milliseconds(), Status: svixAttemptStatus(a), StatusText: svixStatusText(svixAttemptStatus(a)), Timestamp: a.StartedAt}
	if v.msgs != nil {
		m, ok := v.msgs[d.EventID]
		if !ok {
			if ev, _, err := v.s.Store.EventGet(v.ctx, v.tenant, d.EventID); err == nil {
				j := toSvixMessage(ev, true)
				m = &j
			}
			v.msgs[d.EventID] = m
		}
		out.Msg = m
	}
	return out
}

// svixAttempts lists attempts by params (tenant set), filtered by the
// optional status query parameter (a page may then hold fewer).
func (s *Server) svixAttempts(w http.ResponseWriter, r *http.Request, params store.AttemptListParams) error {
	if err := svixUnfiltered(r, "channel", "tag", "event_types"); err != nil {
		return err
	}
	var err error
	if params.Limit, params.Cursor, err = svixList(r); err != nil {
		return err
	}
	if params.Since, err = svixQueryTime(r, "after"); err != nil {
		return err
	}
	if params.Until, err = svixQueryTime(r, "before"); err != nil {
		return err
	}
	status, class := -1, -1
	if v := r.URL.Query().Get("status"); v != "" {
		if status, err = strconv.Atoi(v); err != nil || status < 0 || status > 3 {
			return errQuery("status", "must be 0 (success), 1 (pending), 2 (fail) or 3 (sending)")
		}
	}
	if v := r.URL.Query().Get("status_code_class"); v != "" {
		if class, err = strconv.Atoi(v); err != nil || class < 0 || class > 500 || class%100 != 0 {
			return errQuery("status_code_class", "must be 0 (no answer), 100, 200, 300, 400 or 500")
		}
	}
	page, err := s.Store.AttemptList(r.Context(), params)
	if errors.Is(err, store.ErrInvalidCursor) {
		return errQuery("iterator", "is not one hookd gave")
	}
	if err != nil {
		return err
	}
	views := &attemptViews{s: s, ctx: r.Context(), tenant: params.TenantID, urls: map[string]string{}}
	if r.URL.Query().Get("with_msg") == "true" {
		views.msgs = map[string]*svixMessageJSON{}
	}
	if status >= 0 || class >= 0 {
		kept := page.Data[:0:0]
		for _, row := range page.Data {
			if (status < 0 || svixAttemptStatus(row.Attempt) == status) && (class < 0 || row.Attempt.StatusCode/100*100 == class) {
				kept = append(kept, row)
			}
		}
		page.Data = kept
	}
	svixPage(w, page, params.Limit, views.json)
	return nil
}

func (s *Server) svixAttemptsByEndpoint(w http.ResponseWriter, r *http.Request, p principal) error {
	sub, err := s.svixAppEndpoint(r, p)
	if err != nil {
		return err
	}
	return s.svixAttempts(w, r, store.AttemptListParams{TenantID: sub.TenantID, SubscriptionID: sub.ID})
}

func (s *Server) svixAttemptsByMessage(w http.ResponseWriter, r *http.Request, p principal) error {
	app, ev, _, err := s.svixMessage(r, p)
	if err != nil {
		return err
	}
	params := store.AttemptListParams{TenantID: app.ID, EventID: ev.ID}
	if ref := r.URL.Query().Get("endpoint_id"); ref != "" {
		sub, err := s.svixEndpoint(r.Context(), app.ID, ref)
		if err != nil {
			return err
		}
		params.SubscriptionID = sub.ID
	}
	return s.svixAttempts(w, r, params)
}

func (s *Server) svixGetAttempt(w http.ResponseWriter, r *http.Request, p principal) error {
	app, ev, _, err := s.svixMessage(r, p)
	if err != nil {
		return err
	}
	dlv, n, ok := attemptRef(r.PathValue("attempt_id"))
	if !ok {
		return store.ErrNotFound
	}
	d, attempts, err := s.Store.DeliveryGet(r.Context(), app.ID, dlv)
	if err != nil {
		return err
	}
	if d.EventID != ev.ID {
		return store.ErrNotFound
	}
	for _, a := range attempts {
		if a.N == n {
			views := &attemptViews{s: s, ctx: r.Context(), tenant: app.ID, urls: map[string]string{}}
			writeJSON(w, http.StatusOK, views.json(store.AttemptRow{Attempt: a, Delivery: d}))
			return nil
		}
	}
	return store.ErrNotFound
}

type svixEndpointMessageJSON struct {
	svixMessageJSON
	Status      int        `json:"status"`
	StatusText  string     `json:"statusText"`
	NextAttempt *time.Time `json:"nextAttempt"`
}

// svixListAttemptedMessages lists the messages sent (or to be sent) to an
// endpoint, newest first, with where each stands there.
func (s *Server) svixListAttemptedMessages(w http.ResponseWriter, r *http.Request, p principal) error {
	if err := svixUnfiltered(r, "channel", "tag", "status", "event_types"); err != nil {
		return err
	}
	limit, iter, err := svixList(r)
	if err != nil {
		return err
	}
	params := store.DeliveryListParams{Cursor: iter, Limit: limit}
	if params.Since, err = svixQueryTime(r, "after"); err != nil {
		return err
	}
	if params.Until, err = svixQueryTime(r, "before"); err != nil {
		return err
	}
	sub, err := s.svixAppEndpoint(r, p)
	if err != nil {
		return err
	}
	params.TenantID, params.SubscriptionID = sub.TenantID, sub.ID
	page, err := s.Store.DeliveryList(r.Context(), params)
	if err != nil {
		return err
	}
	content := withContent(r)
	out := store.Page[svixEndpointMessageJSON]{NextCursor: page.NextCursor}
	for _, d := range page.Data {
		ev, _, err := s.Store.EventGet(r.Context(), sub.TenantID, d.EventID)
		if errors.Is(err, store.ErrNotFound) {
			continue // removed by retention meanwhile
		}
		if err != nil {
			return err
		}
		out.Data = append(out.Data, svixEndpointMessageJSON{svixMessageJSON: toSvixMessage(ev, content),
			Status: svixStatus(d.State), StatusText: svixStatusText(svixStatus(d.State)), NextAttempt: nextAttempt(d)})
	}
	svixPage(w, out, limit, func(m svixEndpointMessageJSON) svixEndpointMessageJSON { return m })
	return nil
}

type svixMessageEndpointJSON struct {
	svixEndpointJSON
	Status      int        `json:"status"`
	StatusText  string     `json:"statusText"`
	NextAttempt *time.Time `json:"nextAttempt"`
}

// svixListAttemptedDestinations lists a message's endpoints with where it
// stands at each, in one page.
func (s *Server) svixListAttemptedDestinations(w http.ResponseWriter, r *http.Request, p principal) error {
	app, _, ds, err := s.svixMessage(r, p)
	if err != nil {
		return err
	}
	var out store.Page[svixMessageEndpointJSON]
	for _, d := range ds {
		sub, err := s.Store.SubscriptionGet(r.Context(), app.ID, d.SubscriptionID)
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted since
		}
		if err != nil {
			return err
		}
		out.Data = append(out.Data, svixMessageEndpointJSON{svixEndpointJSON: toSvixEndpoint(sub),
			Status: svixStatus(d.State), StatusText: svixStatusText(svixStatus(d.State)), NextAttempt: nextAttempt(d)})
	}
	svixPage(w, out, len(out.Data), func(m svixMessageEndpointJSON) svixMessageEndpointJSON { return m })
	return nil
}

// svixResend sends a message to an endpoint again: its delivery replayed,
// as POST /v1/deliveries/{id}/replay does.
func (s *Server) svixResend(w http.ResponseWriter, r *http.Request, p principal) error {
	app, ev, ds, err := s.svixMessage(r, p)
	if err != nil {
		return err
	}
	sub, err := s.svixEndpoint(r.Context(), app.ID, r.PathValue("endpoint_id"))
	if err != nil {
		return err
	}
	for _, d := range ds {
		if d.SubscriptionID != sub.ID {
			continue
		}
		d, err := s.Store.DeliveryReplay(audit.Record(r.Context(), audit.ReplayDelivery, d.ID, nil), app.ID, d.ID, time.Now().UTC())
		if errors.Is(err, store.ErrDisabled) {
			return errReplayDisabled
		}
		if errors.Is(err, store.ErrConflict) {
			return &apiError{Status: http.StatusConflict, Code: "conflict", Message: "the message is still pending at this endpoint"}
		}
		if err != nil {
			return err
		}
		s.Dispatch.Wake(d.Host, d.SubscriptionID)
		writeJSON(w, http.StatusAccepted, map[string]any{})
		return nil
	}
	return &apiError{Status: http.StatusNotFound, Code: "not_found",
		Message: "message " + msgID(ev.ID) + " was never sent to endpoint " + epID(sub.ID)}
}
