package core

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// FieldError is bad input, naming the field at fault. The API answers it
// with 400/422 and the field; nothing is written.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

var eventTypeRe = regexp.MustCompile(`^[a-z0-9_-]+(\.[a-z0-9_-]+)*$`)

const maxTypeLen = 128

// ValidateEventType checks a posted event's type: dotted lowercase names.
func ValidateEventType(field, t string) error {
	if t == "" {
		return fieldErr(field, "is required")
	}
	if len(t) > maxTypeLen || !eventTypeRe.MatchString(t) {
		return fieldErr(field, "must be a dotted lowercase name like payment.succeeded (letters, digits, _ and -; at most %d characters)", maxTypeLen)
	}
	return nil
}

// ValidatePatterns checks a subscription's event_types: exact names,
// "prefix.*" or "*".
func ValidatePatterns(field string, ps []string) error {
	if len(ps) == 0 {
		return fieldErr(field, "must list at least one event type")
	}
	if len(ps) > 100 {
		return fieldErr(field, "may list at most 100 event types")
	}
	for i, p := range ps {
		f := fmt.Sprintf("%s[%d]", field, i)
		if p == "*" {
			continue
		}
		if err := ValidateEventType(f, strings.TrimSuffix(p, ".*")); err != nil {
			return fieldErr(f, "must be an event type, prefix.* or *")
		}
	}
	return nil
}

// Matches reports whether pattern p selects event type t.
func Matches(p, t string) bool {
	if p == "*" || p == t {
		return true
	}
	if prefix, ok := strings.CutSuffix(p, "*"); ok {
		return strings.HasPrefix(t, prefix)
	}
	return false
}

// EndpointHost parses a subscription URL and returns its destination key,
// lowercase host:port (default port filled in). Only absolute http(s) URLs
// without fragments are accepted.
func EndpointHost(field, raw string) (string, error) {
	if raw == "" {
		return "", fieldErr(field, "is required")
	}
	if len(raw) > 2048 {
		return "", fieldErr(field, "must be at most 2048 characters")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fieldErr(field, "is not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fieldErr(field, "must use http or https")
	}
	if u.Hostname() == "" {
		return "", fieldErr(field, "must name a host")
	}
	if u.Fragment != "" {
		return "", fieldErr(field, "must not have a fragment")
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port), nil
}

// ParseRetrySchedule parses Go durations ("5s", "1m") into a schedule.
func ParseRetrySchedule(field string, in []string) ([]time.Duration, error) {
	if len(in) > MaxRetrySteps {
		return nil, fieldErr(field, "may have at most %d steps", MaxRetrySteps)
	}
	out := make([]time.Duration, 0, len(in))
	for i, s := range in {
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fieldErr(fmt.Sprintf("%s[%d]", field, i), "is not a duration like \"5s\" or \"2h\"")
		}
		if d < MinRetryDelay || d > MaxRetryDelay {
			return nil, fieldErr(fmt.Sprintf("%s[%d]", field, i), "must be between %s and %s", MinRetryDelay, MaxRetryDelay)
		}
		out = append(out, d)
	}
	return out, nil
}

// FormatDurations is the inverse of ParseRetrySchedule.
func FormatDurations(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return out
}
