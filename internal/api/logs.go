package api

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// The tenant-wide logs: a tenant's events and deliveries newest first, the
// types it sent, and how many of a subscription's deliveries a bulk replay
// would put back. Each reads an index of its own (docs/operations.md).

type eventSummaryJSON struct {
	ID             string    `json:"id"`
	TenantID       string    `json:"tenant_id"`
	Type           string    `json:"type"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	OrderingKey    string    `json:"ordering_key,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
}

// listEvents pages one tenant's events newest first, without payloads,
// filtered by type, idempotency key and creation time.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	params := store.EventListParams{}
	var err error
	if params.Limit, err = parseLimit(q.Get("limit")); err != nil {
		return err
	}
	if params.Cursor, err = timeCursor(q, 1); err != nil {
		return err
	}
	typ, err := queryEventType(q, "type")
	if err != nil {
		return err
	}
	if typ != "" {
		params.Types = []string{typ}
	}
	if k := q.Get("idempotency_key"); len(k) > 255 {
		return errBadRequest("idempotency_key", "must be at most 255 characters")
	} else {
		params.IdempotencyKey = k
	}
	if params.Since, params.Until, err = timeRangeOf(q); err != nil {
		return err
	}
	if params.TenantID, err = s.tenantFor(r.Context(), p, q.Get("tenant_id")); err != nil {
		return err
	}
	page, err := s.Store.EventList(r.Context(), params)
	if err != nil {
		return err
	}
	writePage(w, page, func(e core.Event) eventSummaryJSON {
		return eventSummaryJSON{ID: e.ID, TenantID: e.TenantID, Type: e.Type, IdempotencyKey: e.IdempotencyKey,
			OrderingKey: e.OrderingKey, CreatedAt: e.CreatedAt}
	})
	return nil
}

// listTenantDeliveries pages one tenant's deliveries newest first (by
// their event's creation time), filtered by state, event type, last
// status and creation time.
func (s *Server) listTenantDeliveries(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	params := store.DeliveryListParams{}
	var err error
	if params.Limit, err = parseLimit(q.Get("limit")); err != nil {
		return err
	}
	if params.Cursor, err = timeCursor(q, 2); err != nil {
		return err
	}
	if st := q.Get("state"); st != "" {
		if params.State, err = parseState("state", st); err != nil {
			return err
		}
	}
	if params.EventType, err = queryEventType(q, "event_type"); err != nil {
		return err
	}
	if v := q.Get("status"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 || n > 599 {
			return errBadRequest("status", "must be an HTTP status from 100 to 599")
		}
		params.Status = n
	}
	if params.Since, params.Until, err = timeRangeOf(q); err != nil {
		return err
	}
	if params.TenantID, err = s.tenantFor(r.Context(), p, q.Get("tenant_id")); err != nil {
		return err
	}
	page, err := s.Store.DeliveryListTenant(r.Context(), params)
	if err != nil {
		return err
	}
	writePage(w, page, toDeliveryJSON)
	return nil
}

// listEventTypes pages the distinct event types a tenant has sent, by
// name, so a form offers the types that exist (a pattern with a typo
// matches none of them).
func (s *Server) listEventTypes(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	limit, err := parseLimit(q.Get("limit"))
	if err != nil {
		return err
	}
	tenant, err := s.tenantFor(r.Context(), p, q.Get("tenant_id"))
	if err != nil {
		return err
	}
	types, err := s.Store.EventTypesSent(r.Context(), tenant, q.Get("cursor"), limit+1)
	if err != nil {
		return err
	}
	writePage(w, store.PageOf(types, limit, func(t string) string { return t }), func(t string) string { return t })
	return nil
}

// maxCount bounds a count: past it the answer says "at least".
const maxCount = 100000

// countDeliveries counts a subscription's deliveries in the given states
// (default failed and skipped: what a bulk replay puts back), of the given
// types, created in [since, until), so a person sees what a replay would
// do before asking for it.
func (s *Server) countDeliveries(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	params := store.DeliveryCountParams{TenantID: p.scope(), SubscriptionID: r.PathValue("id"), Max: maxCount + 1}
	states := q.Get("state")
	if states == "" {
		states = "failed,skipped"
	}
	for _, st := range strings.Split(states, ",") {
		ds, err := parseState("state", st)
		if err != nil {
			return err
		}
		params.States = append(params.States, ds)
	}
	if types := q.Get("event_types"); types != "" {
		for i, et := range strings.Split(types, ",") {
			if core.ValidateEventType("event_types", et) != nil {
				return errBadRequest("event_types", "item "+strconv.Itoa(i)+" must be an event type like payment.succeeded")
			}
			params.EventTypes = append(params.EventTypes, et)
		}
	}
	var err error
	if params.Since, params.Until, err = timeRangeOf(q); err != nil {
		return err
	}
	n, err := s.Store.DeliveryCount(r.Context(), params)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": min(n, maxCount), "exact": n <= maxCount})
	return nil
}

func parseState(field, v string) (core.DeliveryState, error) {
	switch st := core.DeliveryState(v); st {
	case core.DeliveryPending, core.DeliveryDelivered, core.DeliveryFailed, core.DeliverySkipped:
		return st, nil
	}
	return "", errBadRequest(field, "must be pending, delivered, failed or skipped")
}

// queryEventType reads an optional exact event type.
func queryEventType(q url.Values, name string) (string, error) {
	v := q.Get(name)
	if v != "" && core.ValidateEventType(name, v) != nil {
		return "", errBadRequest(name, "must be an event type like payment.succeeded")
	}
	return v, nil
}

// timeRangeOf reads since and until; until must come after since.
func timeRangeOf(q url.Values) (since, until time.Time, err error) {
	if since, err = queryTime(q, "since"); err != nil {
		return
	}
	if until, err = queryTime(q, "until"); err != nil {
		return
	}
	if !since.IsZero() && !until.IsZero() && !until.After(since) {
		err = errBadRequest("until", "must be after since")
	}
	return
}

// idCursor reads the cursor of a list paged by ID: an ID of its kind
// (prefix), as next_cursor gave it. Anything else is refused: it would
// answer a first page again, or an empty one, and a client would loop.
func idCursor(q url.Values, prefix string) (string, error) {
	c := q.Get("cursor")
	if c != "" && !isIDOf(c, prefix) {
		return "", errBadRequest("cursor", "is not a next_cursor this list gave")
	}
	return c, nil
}

// isIDOf: id is one core.NewID(prefix) made.
func isIDOf(id, prefix string) bool {
	_, ok := core.IDTime(id)
	return ok && strings.HasPrefix(id, prefix+"_")
}

// timeCursor reads a cursor of a list in time order, of keys IDs.
func timeCursor(q url.Values, keys int) (string, error) {
	c := q.Get("cursor")
	if c == "" {
		return "", nil
	}
	if _, _, err := store.ParseTimeCursor(c, keys); err != nil {
		return "", errBadRequest("cursor", "is not a next_cursor this list gave")
	}
	return c, nil
}
