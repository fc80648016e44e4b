package webhook_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"hookd/webhook"
)

// FuzzVerify feeds Verify arbitrary webhook-id, webhook-timestamp and
// webhook-signature headers and bodies. It never accepts unless some v1
// entry is the HMAC of what it was given (computed here with crypto/hmac)
// and the timestamp is within tolerance; what Sign makes, with any other
// entries around it and a timestamp within tolerance, it accepts; and what
// Sign made outside the tolerance, or with one byte of the body changed,
// or with the timestamp moved by a second, it refuses.
func FuzzVerify(f *testing.F) {
	for _, s := range []struct {
		key          []byte
		id, ts, sigs string
		body         []byte
		skew         int64
		flip         uint
	}{
		{[]byte("0123456789abcdef0123456789abcdef"), "evt_1", "1700000000", "v1,AAAA", []byte(`{"a":1}`), 0, 0},
		{[]byte{1}, "evt_2", "9223372036854775807", "v1,!!! v1a,x v2,y", nil, -300, 7},
		{[]byte{0xff, 0}, "msg", "-9223372036854775808", strings.Repeat("v1,AAAA ", 100), []byte("\x00\r\n"), 300, 3},
		{nil, "", "", "", nil, 0, 0},
	} {
		f.Add(s.key, s.id, s.ts, s.sigs, s.body, s.skew, s.flip)
	}
	now := time.Unix(1_700_000_000, 0)
	f.Fuzz(func(t *testing.T, key []byte, id, ts, sigs string, body []byte, skew int64, flip uint) {
		if len(key) == 0 {
			key = []byte("hookd") // an empty key is a malformed secret
		}
		secret := webhook.SecretPrefix + base64.StdEncoding.EncodeToString(key)

		// Whatever the headers, Verify accepts only the HMAC it was given.
		err := webhook.Verify(secret, header(id, ts, sigs), body, now, 0)
		if err == nil {
			n, perr := strconv.ParseInt(ts, 10, 64)
			if perr != nil || n < now.Unix()-300 || n > now.Unix()+300 {
				t.Fatalf("Verify accepted timestamp %q, now being %d and the tolerance 300 s", ts, now.Unix())
			}
			if !carries(sigs, hmacOf(key, id, n, body)) {
				t.Fatalf("Verify accepted %q for id %q, timestamp %q: no entry is the body's HMAC", sigs, id, ts)
			}
		} else if !isVerifyError(err) {
			t.Fatalf("Verify = %v, want one of webhook's errors", err)
		}

		// Sign's entry among others, within tolerance, is accepted.
		if id == "" {
			id = "evt_fuzz"
		}
		at := now.Add(time.Duration(skew%301) * time.Second)
		sig, err := webhook.Sign(secret, id, at, body)
		if err != nil {
			t.Fatalf("Sign: %v", err)
		}
		if !strings.HasPrefix(sig, "v1,") || !carries(sig, hmacOf(key, id, at.Unix(), body)) {
			t.Fatalf("Sign = %q, want v1, and the HMAC of id.timestamp.body", sig)
		}
		signed := sigs + " " + sig
		tsText := strconv.FormatInt(at.Unix(), 10)
		if err := webhook.Verify(secret, header(id, tsText, signed), body, now, 0); err != nil {
			t.Fatalf("Verify(Sign(...)) = %v, signature %q, %ds from now", err, signed, at.Unix()-now.Unix())
		}

		// Signed more than the tolerance away, it is refused as a replay.
		away := 301 + int64(flip%86400)
		if skew < 0 {
			away = -away
		}
		old := now.Add(time.Duration(away) * time.Second)
		if sig, err = webhook.Sign(secret, id, old, body); err != nil {
			t.Fatalf("Sign: %v", err)
		}
		err = webhook.Verify(secret, header(id, strconv.FormatInt(old.Unix(), 10), sig), body, now, 0)
		if !errors.Is(err, webhook.ErrTimestampOutOfTolerance) {
			t.Fatalf("Verify of a delivery signed %ds from now = %v, want ErrTimestampOutOfTolerance", away, err)
		}

		// One byte changed, or the timestamp moved, is refused.
		changed := bytes.Clone(body)
		if len(changed) == 0 {
			changed = []byte{byte(flip)}
		} else {
			changed[flip%uint(len(changed))] ^= 1 << (flip % 8)
		}
		if err := webhook.Verify(secret, header(id, tsText, signed), changed, now, 0); !errors.Is(err, webhook.ErrNoMatchingSignature) {
			t.Fatalf("Verify of a changed body (%q for %q) = %v, want ErrNoMatchingSignature", changed, body, err)
		}
		moved := at.Unix() + 1
		if moved > now.Unix()+300 {
			moved = at.Unix() - 1
		}
		if err := webhook.Verify(secret, header(id, strconv.FormatInt(moved, 10), signed), body, now, 0); !errors.Is(err, webhook.ErrNoMatchingSignature) {
			t.Fatalf("Verify with the timestamp moved a second = %v, want ErrNoMatchingSignature", err)
		}
	})
}

func header(id, ts, sig string) http.Header {
	h := http.Header{}
	h.Set(webhook.HeaderID, id)
	h.Set(webhook.HeaderTimestamp, ts)
	h.Set(webhook.HeaderSignature, sig)
	return h
}

// hmacOf is the Standard Webhooks signature: HMAC-SHA256 of
// "id.timestamp.body" under the secret's key.
func hmacOf(key []byte, id string, ts int64, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(ts, 10) + "."))
	m.Write(body)
	return m.Sum(nil)
}

// carries reports whether a space-separated v1 entry of sigs decodes to mac.
func carries(sigs string, mac []byte) bool {
	for _, entry := range strings.Fields(sigs) {
		enc, ok := strings.CutPrefix(entry, "v1,")
		if !ok {
			continue
		}
		if got, err := base64.StdEncoding.DecodeString(enc); err == nil && hmac.Equal(got, mac) {
			return true
		}
	}
	return false
}

func isVerifyError(err error) bool {
	for _, e := range []error{webhook.ErrMissingHeaders, webhook.ErrBadTimestamp,
		webhook.ErrTimestampOutOfTolerance, webhook.ErrNoMatchingSignature} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
