package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"hookd/internal/audit"
	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/webhook"
)

// subscriptionFields are the settable fields, shared by create and PATCH;
// a nil pointer means "not given".
type subscriptionFields struct {
	URL              *string   `json:"url"`
	EventTypes       *[]string `json:"event_types"`
	Ordered          *bool     `json:"ordered"`
	RetrySchedule    *[]string `json:"retry_schedule"`
	Timeout          *string   `json:"timeout"`
	MaxConcurrency   *int      `json:"max_concurrency"`
	RateLimit        *float64  `json:"rate_limit"`
	RetryStatusCodes *[]int    `json:"retry_status_codes"`
	// Headers replaces the endpoint's headers as a whole; {} clears them.
	Headers *headerValues `json:"headers"`
}

// headerValues are a request's endpoint headers as sent: a null value is
// told apart from "" and refused (it was stored, then sent empty).
type headerValues map[string]*string

// plain is h with every value a string, or an error naming the first null.
func (h headerValues) plain(bad func(field, msg string) *apiError) (map[string]string, error) {
	out := make(map[string]string, len(h))
	for _, name := range slices.Sorted(maps.Keys(h)) {
		if h[name] == nil {
			return nil, bad("headers", "must be a string at /headers/"+name+", not null")
		}
		out[name] = *h[name]
	}
	return out, nil
}

type createSubscriptionRequest struct {
	subscriptionFields
	TenantID string `json:"tenant_id"`
}

type patchSubscriptionRequest struct {
	subscriptionFields
	State *string `json:"state"`
}

type subscriptionJSON struct {
	ID               string    `json:"id"`
	TenantID         string    `json:"tenant_id"`
	URL              string    `json:"url"`
	EventTypes       []string  `json:"event_types"`
	State            string    `json:"state"`
	DisabledReason   string    `json:"disabled_reason"`
	Ordered          bool      `json:"ordered"`
	RetrySchedule    []string  `json:"retry_schedule"`
	Timeout          string    `json:"timeout"`
	MaxConcurrency   int       `json:"max_concurrency"`
	RateLimit        float64   `json:"rate_limit"`
	RetryStatusCodes []int     `json:"retry_status_codes"`
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
	Secret           string    `json:"secret,omitempty"`
	// Headers shows names only: each value is Redacted.
	Headers map[string]string `json:"headers"`
}

// Redacted stands for every header value in answers. Not a hint such as
// the last characters: values are credentials of unknown shape, and a
// short one (a PIN, an API key's tail) would be given away by any hint.
const Redacted = "[redacted]"

func toSubscriptionJSON(s core.Subscription) subscriptionJSON {
	codes := s.RetryStatusCodes
	if codes == nil {
		codes = []int{}
	}
	headers := make(map[string]string, len(s.Headers))
	for name := range s.Headers {
		headers[name] = Redacted
	}
	return subscriptionJSON{
		ID: s.ID, TenantID: s.TenantID, URL: redactURL(s.URL), EventTypes: s.EventTypes, Headers: headers,
		State: string(s.State), DisabledReason: s.DisabledReason, Ordered: s.Ordered,
		RetrySchedule: core.FormatDurations(s.Schedule()), Timeout: s.SendTimeout().String(),
		MaxConcurrency: s.MaxConcurrency, RateLimit: s.RateLimit, RetryStatusCodes: codes,
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
	}
}

// redactURL hides the credentials of a URL stored with them by a release
// before headers (the store moves them to a header when it opens; one may
// be written meanwhile by a node of that release). The user part goes too:
// it is often the token itself.
func redactURL(raw string) string {
	if !strings.Contains(raw, "@") {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = url.User("redacted")
	return u.String()
}

// apply validates the given fields and sets them on sub. It changes sub
// only if every field is valid.
func (s *Server) apply(f subscriptionFields, sub *core.Subscription) error {
	next := *sub
	if f.URL != nil {
		host, err := core.EndpointHost("url", *f.URL)
		if err != nil {
			return err
		}
		u, _ := url.Parse(*f.URL)
		if err := s.Guard.CheckHost(u.Hostname()); err != nil {
			return errInvalid("url", err.Error())
		}
		next.URL, next.Host = *f.URL, host
	}
	if f.EventTypes != nil {
		if err := core.ValidatePatterns("event_types", *f.EventTypes); err != nil {
			return err
		}
		next.EventTypes = *f.EventTypes
	}
	if f.Ordered != nil {
		next.Ordered = *f.Ordered
	}
	if f.RetrySchedule != nil {
		sched, err := core.ParseRetrySchedule("retry_schedule", *f.RetrySchedule)
		if err != nil {
			return err
		}
		next.RetrySchedule = sched
	}
	if f.Timeout != nil {
		d, err := time.ParseDuration(*f.Timeout)
		if err != nil || d < time.Second || d > core.MaxTimeout {
			return errInvalid("timeout", fmt.Sprintf("must be a duration between 1s and %s", core.MaxTimeout))
		}
		next.Timeout = d
	}
	if f.MaxConcurrency != nil {
		if *f.MaxConcurrency < 0 || *f.MaxConcurrency > 1000 {
			return errInvalid("max_concurrency", "must be between 0 (host default) and 1000")
		}
		next.MaxConcurrency = *f.MaxConcurrency
	}
	if f.RateLimit != nil {
		if r := *f.RateLimit; r != 0 && (!(r >= core.RateMin) || r > 100000) {
			return errInvalid("rate_limit", "must be 0 (unlimited), or from "+strconv.FormatFloat(core.RateMin, 'f', -1, 64)+" to 100000 per second")
		}
		next.RateLimit = *f.RateLimit
		if next.RateLimit == 0 {
			next.RateLimit = 0 // -0 would be shown as -0
		}
	}
	if f.RetryStatusCodes != nil {
		for i, c := range *f.RetryStatusCodes {
			if c < 300 || c > 499 {
				return errInvalid(fmt.Sprintf("retry_status_codes[%d]", i), "must be a 3xx or 4xx status")
			}
			if slices.Contains((*f.RetryStatusCodes)[:i], c) {
				return errInvalid(fmt.Sprintf("retry_status_codes[%d]", i), "is given twice")
			}
		}
		next.RetryStatusCodes = *f.RetryStatusCodes
	}
	if f.Headers != nil {
		plain, err := f.Headers.plain(errBadRequest)
		if err != nil {
			return err
		}
		h, err := core.ValidateHeaders("headers", plain)
		if err != nil {
			return err
		}
		next.Headers = h
	}
	*sub = next
	return nil
}

func (s *Server) createSubscription(w http.ResponseWriter, r *http.Request, p principal) error {
	var req createSubscriptionRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.URL == nil {
		return errInvalid("url", "is required")
	}
	if req.EventTypes == nil {
		return errInvalid("event_types", "is required")
	}
	sub := core.Subscription{State: core.SubActive}
	if err := s.apply(req.subscriptionFields, &sub); err != nil {
		return err
	}
	tenant, err := s.tenantFor(r.Context(), p, req.TenantID)
	if err != nil {
		return err
	}
	sub.TenantID = tenant
	if err := s.addSubscription(r.Context(), &sub); err != nil {
		return err
	}
	out := toSubscriptionJSON(sub)
	out.Secret = sub.Secret
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// addSubscription creates sub (validated, of a resolved tenant) within the
// tenant's limit, with a new ID and times, and a new secret unless it has
// one: the one way both APIs create a subscription. The store counts the
// tenant's subscriptions in the create's own transaction, so the limit
// holds across nodes.
func (s *Server) addSubscription(ctx context.Context, sub *core.Subscription) error {
	if sub.Secret == "" {
		secret, err := webhook.NewSecret()
		if err != nil {
			return err
		}
		sub.Secret = secret
	}
	now := time.Now().UTC()
	sub.ID = core.NewID("sub")
	sub.CreatedAt, sub.UpdatedAt = now, now
	err := s.Subs.CreateWithin(ctx, *sub, s.Limits.MaxSubscriptions)
	if errors.Is(err, store.ErrLimit) {
		return errSubscriptionLimit(sub.TenantID, s.Limits.MaxSubscriptions)
	}
	return err
}

func (s *Server) getSubscription(w http.ResponseWriter, r *http.Request, p principal) error {
	sub, err := s.Store.SubscriptionGet(r.Context(), p.scope(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSubscriptionJSON(sub))
	return nil
}

func (s *Server) listSubscriptions(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	limit, err := parseLimit(q.Get("limit"))
	if err != nil {
		return err
	}
	withHealth, err := parseInclude(q)
	if err != nil {
		return err
	}
	tenant, err := s.tenantFor(r.Context(), p, q.Get("tenant_id"))
	if err != nil {
		return err
	}
	cursor, err := idCursor(q, "sub")
	if err != nil {
		return err
	}
	page, err := s.Store.SubscriptionList(r.Context(), store.SubscriptionListParams{
		TenantID: tenant, Cursor: cursor, Limit: limit,
	})
	if err != nil {
		return err
	}
	return s.writeSubscriptions(w, r, page, withHealth)
}

// subscriptionHealthJSON is a subscription with its health embedded
// (?include=health): a list page in one request, not one per row.
type subscriptionHealthJSON struct {
	subscriptionJSON
	Health *healthJSON `json:"health,omitempty"`
}

// parseInclude reads ?include=: health, or nothing.
func parseInclude(q url.Values) (bool, error) {
	switch v := q.Get("include"); v {
	case "":
		return false, nil
	case "health":
		return true, nil
	}
	return false, errBadRequest("include", "must be health (the only embeddable part)")
}

// writeSubscriptions answers a page of subscriptions, each with its health
// when asked: its store counts for the whole page in one query.
func (s *Server) writeSubscriptions(w http.ResponseWriter, r *http.Request, page store.Page[core.Subscription], withHealth bool) error {
	var stats map[string]store.DeliveryStats
	if withHealth {
		ids := make([]string, len(page.Data))
		for i, sub := range page.Data {
			ids[i] = sub.ID
		}
		var err error
		if stats, err = s.Store.DeliveryStatsList(r.Context(), "", ids); err != nil {
			return err
		}
	}
	now := time.Now()
	writePage(w, page, func(sub core.Subscription) subscriptionHealthJSON {
		out := subscriptionHealthJSON{subscriptionJSON: toSubscriptionJSON(sub)}
		if withHealth {
			h := s.health(sub, stats[sub.ID], now)
			out.Health = &h
		}
		return out
	})
	return nil
}

func (s *Server) patchSubscription(w http.ResponseWriter, r *http.Request, p principal) error {
	var req patchSubscriptionRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	// Validated against the stored subscription, under its change lock:
	// nothing is written unless every field is valid.
	sub, err := s.Subs.Update(r.Context(), p.scope(), r.PathValue("id"), func(sub *core.Subscription) error {
		if err := s.apply(req.subscriptionFields, sub); err != nil {
			return err
		}
		if req.State != nil {
			switch st := core.SubscriptionState(*req.State); st {
			case core.SubActive, core.SubPaused:
				sub.State, sub.DisabledReason = st, ""
			case core.SubDisabled:
				sub.State, sub.DisabledReason = st, "disabled by request"
			default:
				return errInvalid("state", "must be active, paused or disabled")
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSubscriptionJSON(sub))
	return nil
}

func (s *Server) deleteSubscription(w http.ResponseWriter, r *http.Request, p principal) error {
	if err := noBody(w, r); err != nil {
		return err
	}
	if err := s.Subs.Delete(r.Context(), p.scope(), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// rotateSecret issues a new secret; the old one keeps signing for 24 h so
// receivers can switch without missing a delivery.
func (s *Server) rotateSecret(w http.ResponseWriter, r *http.Request, p principal) error {
	if err := noBody(w, r); err != nil {
		return err
	}
	sub, err := s.Subs.Rotate(r.Context(), p.scope(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"secret": sub.Secret, "previous_secret_expires_at": sub.PrevSecretExpiresAt})
	return nil
}

func parseLimit(v string) (int, error) {
	if v == "" {
		return 50, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		return 0, errBadRequest("limit", "must be a whole number from 1 to 100")
	}
	return n, nil
}

// writePage answers a list: {data, next_cursor}, null on the last page.
func writePage[T, J any](w http.ResponseWriter, page store.Page[T], toJSON func(T) J) {
	data := make([]J, len(page.Data))
	for i, v := range page.Data {
		data[i] = toJSON(v)
	}
	var cursor any
	if page.NextCursor != "" {
		cursor = page.NextCursor
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data, "next_cursor": cursor})
}

type testEventRequest struct {
	Payload jsontext.Value `json:"payload"`
}

// testSubscription sends a hookd.test event to one subscription alone, as
// an endpoint's owner checks a new endpoint: signed and retried like any
// other delivery, within the tenant's ingest rate like any event, and
// audited. The body is optional.
func (s *Server) testSubscription(w http.ResponseWriter, r *http.Request, p principal) error {
	var req testEventRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, &req); err != nil {
			return err
		}
	}
	sub, err := s.Store.SubscriptionGet(r.Context(), p.scope(), r.PathValue("id"))
	if err != nil {
		return err
	}
	payload := []byte(req.Payload)
	chosen := len(payload) > 0 && string(payload) != "null"
	if chosen && p.portal && sub.SvixHeaders {
		// A Svix-format body is the payload itself, signed: nothing would
		// tell this test from a real message of the platform's.
		return &apiError{Status: http.StatusForbidden, Code: "forbidden", Field: "payload",
			Message: "payload: a portal session cannot choose what a Svix-format endpoint is sent, whose body is the payload itself with nothing to mark it a test; send the test without one"}
	}
	switch {
	case !chosen:
		payload, _ = json.Marshal(map[string]any{"test": true, "subscription_id": sub.ID})
	case len(payload) > core.MaxPayloadBytes:
		return errTooLarge
	}
	res, err := s.submitEvent(w, r, core.Event{TenantID: sub.TenantID, Type: core.ReservedPrefix + "test",
		Payload: payload, Only: sub.ID})
	if err != nil {
		return err
	}
	if len(res.Deliveries) != 1 {
		// The registry did not hold it: deleted, or made on another node a
		// moment ago.
		return &apiError{Status: http.StatusConflict, Code: "conflict", Field: "id",
			Message: "the subscription is not known to this node yet; try again"}
	}
	d := res.Deliveries[0]
	// After the send, so the entry names it. Should the entry fail, so
	// does the answer: a client's retry sends another test event, which
	// is harmless, and no answered test goes unrecorded.
	ctx := audit.Record(r.Context(), audit.SubscriptionTest, sub.ID, map[string]any{"event_id": res.EventID, "delivery_id": d.ID})
	if err := s.Store.SubscriptionTested(ctx, sub); err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"event_id": res.EventID, "delivery_id": d.ID, "state": string(d.State)})
	return nil
}
