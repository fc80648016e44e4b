package send

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"hookd/internal/core"
)

// Class is what the dispatcher should do after an attempt.
type Class int

const (
	Delivered Class = iota // 2xx: done
	Retry                  // transient: try again per the schedule
	Fail                   // permanent: fail the delivery now
	Gone                   // 410: fail the delivery and disable the subscription
)

func (c Class) String() string {
	switch c {
	case Delivered:
		return "delivered"
	case Retry:
		return "retry"
	case Fail:
		return "fail"
	case Gone:
		return "gone"
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// Outcome is one attempt's result, ready to be stored as a core.Attempt.
type Outcome struct {
	Class      Class
	StatusCode int    // 0 when there was no HTTP answer
	Err        string // short and human; empty on an HTTP answer
	StartedAt  time.Time
	Duration   time.Duration
	Response   string // first core.MaxResponseHead bytes of the answer body, valid UTF-8
	// ResponseHeaders are the answer's headers as headerText writes them.
	ResponseHeaders string
	RetryAfter      time.Duration // from a Retry-After header, capped at core.MaxRetryAfter; 0 if none
	// Conn: the attempt failed before a connection was made (DNS, refused,
	// unreachable, TLS, a connect timeout, a reset while connecting). That
	// is evidence about the host, shared by every endpoint on it; a timeout
	// waiting for an answer, a connection reset or closed once made, or an
	// HTTP status, is evidence about the endpoint.
	Conn bool
}

// classify maps an HTTP status to a Class per DESIGN.md "Sending".
func classify(code int, sub *core.Subscription) Class {
	switch {
	case code >= 200 && code <= 299:
		return Delivered
	case code == 408 || code == 425 || code == 429 || code >= 500:
		return Retry
	case slices.Contains(sub.RetryStatusCodes, code):
		// The subscriber asked to retry this code (even 410).
		return Retry
	case code == http.StatusGone:
		return Gone
	case sub.SvixHeaders:
		// Made through the Svix-compatible API: Svix retries any other
		// answer, and receivers moved from it count on that (a 404 while
		// they deploy, a 401 while a secret rotates).
		return Retry
	}
	return Fail
}

// parseRetryAfter reads delta-seconds or an HTTP-date relative to now.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs > int64(core.MaxRetryAfter/time.Second) {
			return core.MaxRetryAfter
		}
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), core.MaxRetryAfter)
}

// responseText makes a stored response head safe for any store: valid
// UTF-8, no NULs (PostgreSQL text rejects both), at most MaxResponseHead bytes.
func responseText(b []byte) string {
	// A rune cut in half by the read limit is dropped, not mangled.
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				b = b[:i]
			}
			break
		}
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	for len(s) > core.MaxResponseHead {
		// Replacements can grow the text; cut back on a rune boundary.
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// headerText writes an answer's headers for people to read: one "Name:
// value" a line (several values joined by ", "), by name, valid UTF-8,
// whole lines up to core.MaxResponseHead bytes.
func headerText(h http.Header) string {
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		line := name + ": " + strings.Join(h[name], ", ") + "\n"
		line = strings.ReplaceAll(strings.ToValidUTF8(line, "\uFFFD"), "\x00", "\uFFFD")
		if b.Len()+len(line) > core.MaxResponseHead {
			break
		}
		b.WriteString(line)
	}
	return b.String()
}
