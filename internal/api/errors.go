package api

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"hookd/internal/core"
	"hookd/internal/ingest"
	"hookd/internal/outage"
	"hookd/internal/store"
)

// apiError is an answer other than success. Internal errors reach clients
// only as "internal error"; the detail goes to the log.
type apiError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// RequestID is set on 500 answers, so a report can be matched to the log.
	RequestID string `json:"request_id,omitempty"`
	// JobID names the bulk replay already running (replay_running).
	JobID string `json:"job_id,omitempty"`
	// RetryAfter, if set, is answered as the Retry-After header (seconds).
	RetryAfter int `json:"-"`
}

func (e *apiError) Error() string { return e.Message }

func errInvalid(field, msg string) *apiError {
	return &apiError{Status: http.StatusUnprocessableEntity, Code: "invalid", Field: field, Message: field + ": " + msg}
}

func errBadRequest(field, msg string) *apiError {
	// Prefixed only when there is a field: trimming ": " off the joined
	// message also cut the start of a member named ": x" (found by fuzzing).
	if field != "" {
		msg = field + ": " + msg
	}
	return &apiError{Status: http.StatusBadRequest, Code: "bad_request", Field: field, Message: msg}
}

var (
	errNotFound     = &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "not found"}
	errUnauthorized = &apiError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "missing or invalid bearer token"}
	errForbidden    = &apiError{Status: http.StatusForbidden, Code: "forbidden", Message: "this call needs the admin token"}
	errBodyTimeout  = &apiError{Status: http.StatusRequestTimeout, Code: "request_timeout", Field: "body", Message: "body: not received in time (the whole request must arrive within the server's read timeout, 30 s)"}
	errTooLarge     = &apiError{Status: http.StatusRequestEntityTooLarge, Code: "too_large", Field: "payload", Message: "payload: must be at most 262144 bytes"}
)

// errReplayNotRunning: only a running bulk replay can be cancelled; the
// message says where this one stands.
func errReplayNotRunning(state core.ReplayState) *apiError {
	return &apiError{Status: http.StatusConflict, Code: "conflict",
		Message: "the replay job is " + string(state) + " already: only a running job can be cancelled"}
}

// Retry-After of the store's outages: a database restarting is back in
// seconds; a full disk waits for an operator.
const (
	retryUnavailable = "5"
	retryFull        = "60"
)

// errStore answers a store outage: 503 while the database cannot be
// reached, 507 while it has no room, each with Retry-After, so clients
// retry (with the same idempotency_key) and alerts name the cause.
func errStore(w http.ResponseWriter, err error) *apiError {
	if errors.Is(err, store.ErrFull) {
		w.Header().Set("Retry-After", retryFull)
		return &apiError{Status: http.StatusInsufficientStorage, Code: "storage_full",
			Message: "the database is full; nothing was written: retry after Retry-After seconds (an event with the same idempotency_key)"}
	}
	w.Header().Set("Retry-After", retryUnavailable)
	return &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable",
		Message: "the database cannot be reached; nothing was written: retry after Retry-After seconds (an event with the same idempotency_key)"}
}

// errInternal is a server fault: the detail is in the log under requestID.
func errInternal(requestID string) *apiError {
	ae := &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error", RequestID: requestID}
	if requestID != "" {
		ae.Message += " (request " + requestID + ")"
	}
	return ae
}

// writeError maps any error to its status: the one table from application
// errors to HTTP. It returns the error code answered. began is when the
// request's work started, so a store call begun before an outage ended
// does not begin another (outage.Tracker.Fail).
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, began time.Time, err error) string {
	ae := s.errorFor(w, r, began, err)
	writeJSON(w, ae.Status, map[string]any{"error": ae})
	return ae.Code
}

// errorFor is the table: the answer to err (headers such as Retry-After
// set on w), whichever API writes it.
func (s *Server) errorFor(w http.ResponseWriter, r *http.Request, began time.Time, err error) *apiError {
	// A driver's error a store method passed on unmapped is still an
	// outage when the backend says so: 503/507, not 500.
	if s.Store != nil {
		err = s.Store.HealthOutage(err)
	}
	var ae *apiError
	var fe *core.FieldError
	switch {
	case errors.As(err, &ae):
		if ae.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(ae.RetryAfter))
		}
	case errors.As(err, &fe):
		ae = errInvalid(fe.Field, fe.Message)
	case errors.Is(err, store.ErrNotFound):
		ae = errNotFound
	case errors.Is(err, ingest.ErrClosed):
		ae = &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "shutting down; retry with the same idempotency_key"}
	case outage.Is(err):
		// Logged once per outage by the tracker, not once per request.
		s.Outage.Fail(began, err)
		ae = errStore(w, err)
	case errors.Is(err, store.ErrConflict):
		ae = &apiError{Status: http.StatusConflict, Code: "conflict", Message: "conflict with the current state"}
	default:
		id := requestID(r.Context())
		s.log.Error("request failed", "request_id", id, "method", r.Method, "path", r.URL.Path, "err", err)
		ae = errInternal(id)
	}
	return ae
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		slog.Debug("writing response", "err", err)
	}
}

// svixCodes are Svix's codes for hookd's where Svix has its own; others
// (unavailable, ingest_rate_limited, …) keep hookd's.
var svixCodes = map[string]string{
	"not_found": "not_found", "unauthorized": "authentication_failed", "forbidden": "insufficient access",
	"conflict": "conflict", "too_large": "payload_too_large", "internal": "server_error", "bad_request": "bad_request",
}

// svixBody is an error as Svix's API answers it: {code, detail}, or for a
// field that is not valid (422) {detail: [{loc, msg, type}]}.
func svixBody(ae *apiError) any {
	if ae.Status == http.StatusUnprocessableEntity && ae.Field != "" {
		loc := append([]string{"body"}, strings.Split(ae.Field, ".")...) // headers.X-Key: ["body", "headers", "X-Key"]
		if ae.Field == "body" {
			loc = loc[:1] // the body as a whole
		}
		if q, ok := strings.CutPrefix(ae.Field, "query."); ok {
			loc = []string{"query", q}
		}
		msg := strings.TrimPrefix(ae.Message, strings.TrimPrefix(ae.Field, "query.")+": ")
		return map[string]any{"detail": []map[string]any{{"loc": loc, "msg": msg, "type": "value_error"}}}
	}
	code := ae.Code
	if c, ok := svixCodes[code]; ok {
		code = c
	}
	return map[string]string{"code": code, "detail": ae.Message}
}
