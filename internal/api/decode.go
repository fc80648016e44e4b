package api

import (
	"bufio"
	"errors"
	"io"
	"maps"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"hookd/internal/core"
)

// maxBody bounds a request body: the largest payload plus room for the rest.
const maxBody = core.MaxPayloadBytes + 64<<10

// decode is the one way a handler reads its JSON body: exactly one JSON
// object, valid UTF-8 throughout (the payload included: it is delivered as
// application/json), member names matching the request's fields exactly
// (encoding/json would take "TYPE" for "type"), no member twice at any
// depth (which one wins differs between parsers), no unknown member, no
// trailing data. Each refusal is a 400 naming the field at fault.
func decode(w http.ResponseWriter, r *http.Request, v any) error { return decodeJSON(w, r, v, true) }

// decodeJSON is decode; with strict false an unknown member is passed
// over, as Svix's server does (its SDKs may send fields hookd lacks).
func decodeJSON(w http.ResponseWriter, r *http.Request, v any, strict bool) error {
	body := bufio.NewReader(http.MaxBytesReader(w, r.Body, maxBody))
	// null would decode as {} (nothing set), and a PATCH of nothing still
	// writes: every body is an object or refused.
	if c, err := firstByte(body); err == nil && c != '{' {
		return errBadRequest("body", "must be one JSON object")
	}
	if err := json.UnmarshalRead(body, v, json.RejectUnknownMembers(strict), json.WithUnmarshalers(exactFloats)); err != nil {
		return decodeError(err)
	}
	if field := nulField(reflect.ValueOf(v), ""); field != "" {
		return errBadRequest(field, `must not contain the NUL character (\u0000)`)
	}
	return nil
}

// noBody reads the body of a call that takes none: nothing, or {} (some
// clients send one with every POST). Anything else is refused, and the
// call does not go ahead on a body it would have ignored.
func noBody(w http.ResponseWriter, r *http.Request) error {
	body := bufio.NewReader(http.MaxBytesReader(w, r.Body, maxBody))
	if _, err := firstByte(body); err == io.EOF {
		return nil
	} else if err != nil {
		return decodeError(err)
	}
	r.Body = io.NopCloser(body)
	if err := decode(w, r, &struct{}{}); err != nil {
		return errBadRequest("body", "must be empty or {}: this call takes no body")
	}
	return nil
}

// exactFloats refuses, as out of range, a number too small for a float64
// that is not 0: 1e-400 decoded as 0, and a rate_limit of 0 is unlimited.
var exactFloats = json.UnmarshalFromFunc(func(dec *jsontext.Decoder, f *float64) error {
	if dec.PeekKind() != '0' {
		return json.SkipFunc // not a number: the default's error
	}
	v, err := dec.ReadValue()
	if err != nil {
		return err
	}
	n, err := strconv.ParseFloat(string(v), 64)
	mantissa, _, _ := strings.Cut(strings.ToLower(string(v)), "e")
	if err == nil && n == 0 && strings.ContainsAny(mantissa, "123456789") {
		err = &strconv.NumError{Func: "ParseFloat", Num: string(v), Err: strconv.ErrRange}
	}
	if err != nil {
		return err
	}
	*f = n
	return nil
})

// firstByte is br's first byte past JSON whitespace, left unread.
func firstByte(br *bufio.Reader) (byte, error) {
	for {
		c, err := br.ReadByte()
		if err != nil {
			return 0, err
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c, br.UnreadByte()
	}
}

// nulField names the first string of a request holding NUL (U+0000):
// PostgreSQL text cannot store it (the insert failed, a 500; found by
// fuzzing), and no ID, key or name needs it. Payloads (bytes) keep theirs;
// maps are their handlers' to check (headers refuse control characters).
func nulField(v reflect.Value, name string) string {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			return nulField(v.Elem(), name)
		}
	case reflect.String:
		if strings.IndexByte(v.String(), 0) >= 0 {
			return name
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return ""
		}
		for i := range v.Len() {
			if f := nulField(v.Index(i), name+"["+strconv.Itoa(i)+"]"); f != "" {
				return f
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			n := name // an embedded struct's fields are the request's own
			if !f.Anonymous {
				n, _, _ = strings.Cut(f.Tag.Get("json"), ",")
			}
			if got := nulField(v.Field(i), n); got != "" {
				return got
			}
		}
	}
	return ""
}

// badText names the part of a request's path or query that PostgreSQL
// text cannot hold, NUL or invalid UTF-8 ("%00", "%ff"): looked up as an
// ID or cursor, either failed the query, a 500 (no ID holds them).
func badText(r *http.Request) error {
	bad := func(s string) bool { return strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) }
	if bad(r.URL.Path) {
		return errBadRequest("path", "must be UTF-8 without NUL (%00)")
	}
	q := r.URL.Query()
	names := slices.Sorted(maps.Keys(q))
	for _, name := range names {
		if bad(name) || slices.ContainsFunc(q[name], bad) {
			return errBadRequest(strings.ToValidUTF8(name, "?"), "must be UTF-8 without NUL (%00)")
		}
	}
	return nil
}

// opaque are request fields whose content is the client's own: an error
// inside one names the field, and the message gives the JSON pointer.
var opaque = map[string]bool{"payload": true}

func decodeError(err error) error {
	var mbe *http.MaxBytesError
	var syn *jsontext.SyntacticError
	var sem *json.SemanticError
	switch {
	case errors.As(err, &mbe):
		return errTooLarge
	case errors.As(err, &syn):
		field, where := fieldOf(syn.JSONPointer)
		switch {
		case field == "" || errors.Is(syn.Err, io.ErrUnexpectedEOF):
			return errBadRequest("body", "is not valid JSON: "+syn.Err.Error())
		case errors.Is(syn.Err, jsontext.ErrDuplicateName):
			return errBadRequest(field, "duplicate key"+where+" (a key may appear once in an object)")
		}
		// Invalid UTF-8, a lone surrogate escape, a bad token inside a value.
		return errBadRequest(field, syn.Err.Error()+where)
	case errors.As(err, &sem):
		field, where := fieldOf(sem.JSONPointer)
		switch {
		case field == "":
			return errBadRequest("body", "must be one JSON object")
		case errors.Is(sem.Err, json.ErrUnknownName):
			return errBadRequest(field, "is not a known field (names match exactly, in lower case)")
		case errors.Is(sem.Err, strconv.ErrRange):
			return errBadRequest(field, "is out of range for "+kindOf(sem.GoType)+where)
		}
		return errBadRequest(field, "must be "+kindOf(sem.GoType)+where)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return errBadRequest("body", "is not valid JSON")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errBodyTimeout
	}
	// The connection failed or its framing did (a bad chunk): the parser's
	// words name our socket, not the client's mistake.
	return errBadRequest("body", "could not be read: the connection failed or its body is not framed right (Content-Length, chunked encoding)")
}

// fieldOf names the request field a JSON pointer is in, with list indexes
// ("/event_types/1" is event_types[1]); inside an opaque field it also
// returns where (" at /payload/a") for the message.
func fieldOf(p jsontext.Pointer) (field, where string) {
	for tok := range p.Tokens() {
		switch {
		case field == "":
			field = tok
			if opaque[tok] && p != "/"+jsontext.Pointer(tok) {
				return field, at(p)
			}
		case isIndex(tok):
			field += "[" + tok + "]"
		default:
			return field, at(p)
		}
	}
	return field, ""
}

// maxPointer bounds the JSON pointer a message quotes: one into a payload
// nested 10,000 deep made a 20 KB error message.
const maxPointer = 200

// at is " at <pointer>" for a message, a long pointer cut in the middle
// (its start names the field, its end the place).
func at(p jsontext.Pointer) string {
	s := string(p)
	if len(s) > maxPointer {
		s = strings.ToValidUTF8(s[:maxPointer/2], "") + "/…" + strings.ToValidUTF8(s[len(s)-maxPointer/2:], "")
	}
	return " at " + s
}

func isIndex(tok string) bool {
	_, err := strconv.Atoi(tok)
	return err == nil && !strings.HasPrefix(tok, "+") && !strings.HasPrefix(tok, "-")
}

// kindOf says what JSON a Go type takes, for "must be …".
func kindOf(t reflect.Type) string {
	if t == nil {
		return "of another type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Bool:
		return "true or false"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "of another type"
}

// The times hookd takes: RFC 3339 has four-digit years, and nothing was
// stored before 1970. Checked in UTC, so an offset cannot carry a time out.
var (
	minTime = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

// parseTime is the one way a handler reads a time: RFC 3339, from 1970 to
// 9999, returned in UTC. bad makes the refusal (400 for a query
// parameter, 422 for a body field).
func parseTime(field, v string, bad func(field, msg string) *apiError) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, bad(field, "must be an RFC 3339 time like 2026-01-02T15:04:05Z")
	}
	t = t.UTC()
	if t.Before(minTime) || t.After(maxTime) {
		return time.Time{}, bad(field, "must be from 1970-01-01T00:00:00Z to 9999-12-31T23:59:59Z")
	}
	return t, nil
}
