// Package webhook signs and verifies webhooks following the Standard Webhooks
// specification (https://www.standardwebhooks.com/). Receivers can import it
// to check deliveries from hookd; it depends only on the standard library.
package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names set on every delivery.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts every secret; the rest is the base64 key.
const SecretPrefix = "whsec_"

// DefaultTolerance is how far a delivery's timestamp may be from the
// receiver's clock, either way, before it is rejected as a possible replay.
const DefaultTolerance = 5 * time.Minute

// Errors returned by Verify (and ErrBadSecret by Sign); test with errors.Is.
var (
	ErrBadSecret               = errors.New("webhook: malformed secret")
	ErrMissingHeaders          = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature header")
	ErrBadTimestamp            = errors.New("webhook: webhook-timestamp is not unix seconds")
	ErrTimestampOutOfTolerance = errors.New("webhook: timestamp outside tolerance")
	ErrNoMatchingSignature     = errors.New("webhook: no matching signature")
)

// NewSecret returns a fresh random secret: "whsec_" + base64 of 24 bytes.
func NewSecret() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b[:]), nil
}

// key decodes the HMAC key from a "whsec_<base64>" secret.
func key(secret string) ([]byte, error) {
	enc, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: want %s prefix", ErrBadSecret, SecretPrefix)
	}
	k, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(k) == 0 {
		return nil, fmt.Errorf("%w: key is not base64", ErrBadSecret)
	}
	return k, nil
}

func mac(k []byte, msgID string, unix int64, body []byte) []byte {
	m := hmac.New(sha256.New, k)
	m.Write([]byte(msgID))
	m.Write([]byte{'.'})
	m.Write([]byte(strconv.FormatInt(unix, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Sign returns the "v1,<base64 signature>" entry for one delivery.
func Sign(secret, msgID string, ts time.Time, body []byte) (string, error) {
	k, err := key(secret)
	if err != nil {
		return "", err
	}
	return "v1," + base64.StdEncoding.EncodeToString(mac(k, msgID, ts.Unix(), body)), nil
}

// Verify checks a delivery's headers and body against secret. It passes if
// any "v1," entry in webhook-signature matches (several appear while the
// sender rotates secrets) and the timestamp is within tolerance of now
// (tolerance <= 0 means DefaultTolerance).
func Verify(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	k, err := key(secret)
	if err != nil {
		return err
	}
	id, tsText, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || tsText == "" || sigs == "" {
		return ErrMissingHeaders
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return ErrBadTimestamp
	}
	// Compare in seconds, bounds first, so extreme timestamps cannot overflow.
	tol := int64(tolerance / time.Second)
	if ts < now.Unix()-tol || ts > now.Unix()+tol {
		return fmt.Errorf("%w: %s is %s from now (tolerance %s)", ErrTimestampOutOfTolerance, tsText, describeSkew(now.Unix(), ts), tolerance)
	}
	want := mac(k, id, ts, body)
	for _, entry := range strings.Fields(sigs) {
		enc, ok := strings.CutPrefix(entry, "v1,")
		if !ok {
			continue // another scheme (e.g. v1a): not ours to judge
		}
		got, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			continue
		}
		if hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrNoMatchingSignature
}

func describeSkew(now, ts int64) string {
	if ts > now+int64(24*time.Hour/time.Second) || ts < now-int64(24*time.Hour/time.Second) {
		return "more than a day"
	}
	return (time.Duration(now-ts) * time.Second).String()
}
