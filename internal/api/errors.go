package api

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"hookd/internal/core"
	"hookd/internal/ingest"
	"hookd/internal/store"
)

// apiError is an answer other than success. Internal errors reach clients
// only as "internal error"; the detail goes to the log.
type apiError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

func (e *apiError) Error() string { return e.Message }

func errInvalid(field, msg string) *apiError {
	return &apiError{Status: http.StatusUnprocessableEntity, Code: "invalid", Field: field, Message: field + ": " + msg}
}

func errBadRequest(field, msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: "bad_request", Field: field, Message: strings.TrimPrefix(field+": "+msg, ": ")}
}

var (
	errNotFound     = &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "not found"}
	errUnauthorized = &apiError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "missing or invalid bearer token"}
	errForbidden    = &apiError{Status: http.StatusForbidden, Code: "forbidden", Message: "this call needs the admin token"}
	errTooLarge     = &apiError{Status: http.StatusRequestEntityTooLarge, Code: "too_large", Field: "payload", Message: "payload: must be at most 262144 bytes"}
)

// writeError maps any error to its status: the one table from application
// errors to HTTP. It returns the error code answered.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) string {
	var ae *apiError
	var fe *core.FieldError
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &fe):
		ae = errInvalid(fe.Field, fe.Message)
	case errors.Is(err, store.ErrNotFound):
		ae = errNotFound
	case errors.Is(err, ingest.ErrClosed):
		ae = &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "shutting down; retry with the same idempotency_key"}
	case errors.Is(err, store.ErrConflict):
		ae = &apiError{Status: http.StatusConflict, Code: "conflict", Message: "conflict with the current state"}
	default:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		ae = &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error"}
	}
	writeJSON(w, ae.Status, map[string]any{"error": ae})
	return ae.Code
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

// maxBody bounds a request body: the largest payload plus room for the rest.
const maxBody = core.MaxPayloadBytes + 64<<10

// decode reads one JSON object strictly: unknown fields and trailing data
// are errors naming what is wrong.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, maxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errBadRequest("body", "must hold exactly one JSON object")
	}
	return nil
}

func decodeError(err error) error {
	var mbe *http.MaxBytesError
	var ute *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &mbe):
		return errTooLarge
	case errors.As(err, &ute):
		return errBadRequest(ute.Field, "must be "+jsonKind(ute.Type.Kind().String()))
	case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return errBadRequest("body", "is not valid JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return errBadRequest(f, "is not a known field")
	}
	return errBadRequest("body", err.Error())
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "slice", "array":
		return "an array"
	case "bool":
		return "true or false"
	case "struct", "map":
		return "an object"
	case "int", "int64", "float64":
		return "a number"
	}
	return "of another type"
}
