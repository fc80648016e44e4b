package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNewSecret(t *testing.T) {
	s, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	enc, ok := strings.CutPrefix(s, "whsec_")
	if !ok {
		t.Fatalf("secret %q lacks whsec_ prefix", s)
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(raw) != 24 {
		t.Fatalf("secret key: %d bytes, err %v; want 24 bytes", len(raw), err)
	}
	if s2, _ := NewSecret(); s2 == s {
		t.Fatal("two secrets are equal")
	}
}

// The published Standard Webhooks test vector (used by its reference libraries).
func TestSignKnownAnswer(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	const id = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	body := []byte(`{"test": 2432232314}`)
	ts := time.Unix(1614265330, 0)

	got, err := Sign(secret, id, ts, body)
	if err != nil {
		t.Fatal(err)
	}
	// Independent computation, spelled out from the spec.
	key, _ := base64.StdEncoding.DecodeString("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	m := hmac.New(sha256.New, key)
	m.Write([]byte("msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330." + string(body)))
	want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	if got != want {
		t.Fatalf("Sign = %q, independent HMAC = %q", got, want)
	}
	const published = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	if got != published {
		t.Fatalf("Sign = %q, published vector = %q", got, published)
	}
}

func TestSignBadSecret(t *testing.T) {
	for _, s := range []string{"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_", "whsec_not base64!"} {
		if _, err := Sign(s, "id", time.Now(), nil); !errors.Is(err, ErrBadSecret) {
			t.Errorf("Sign(%q): err = %v, want ErrBadSecret", s, err)
		}
	}
}

func headers(id string, ts time.Time, sig string) http.Header {
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	h.Set("webhook-signature", sig)
	return h
}

func TestVerify(t *testing.T) {
	secret, _ := NewSecret()
	other, _ := NewSecret()
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"id":"evt_1","type":"payment.succeeded"}`)
	sig, err := Sign(secret, "evt_1", now, body)
	if err != nil {
		t.Fatal(err)
	}
	otherSig, _ := Sign(other, "evt_1", now, body)

	tests := []struct {
		name string
		h    http.Header
		body []byte
		now  time.Time
		want error // nil: passes
	}{
		{"valid", headers("evt_1", now, sig), body, now, nil},
		{"clock skew inside tolerance", headers("evt_1", now, sig), body, now.Add(4 * time.Minute), nil},
		{"receiver clock behind", headers("evt_1", now, sig), body, now.Add(-4 * time.Minute), nil},
		{"rotation: second entry matches", headers("evt_1", now, otherSig+" "+sig), body, now, nil},
		{"unknown versions ignored", headers("evt_1", now, "v1a,abcd "+sig), body, now, nil},
		{"tampered body", headers("evt_1", now, sig), []byte(`{"id":"evt_1","type":"payment.failed"}`), now, ErrNoMatchingSignature},
		{"tampered id", headers("evt_2", now, sig), body, now, ErrNoMatchingSignature},
		{"tampered timestamp", headers("evt_1", now.Add(time.Second), sig), body, now, ErrNoMatchingSignature},
		{"wrong secret only", headers("evt_1", now, otherSig), body, now, ErrNoMatchingSignature},
		{"only other versions", headers("evt_1", now, "v2,"+strings.TrimPrefix(sig, "v1,")), body, now, ErrNoMatchingSignature},
		{"garbage signature", headers("evt_1", now, "v1,@@@"), body, now, ErrNoMatchingSignature},
		{"too old", headers("evt_1", now, sig), body, now.Add(6 * time.Minute), ErrTimestampOutOfTolerance},
		{"too new", headers("evt_1", now, sig), body, now.Add(-6 * time.Minute), ErrTimestampOutOfTolerance},
		{"bad timestamp", func() http.Header { h := headers("evt_1", now, sig); h.Set("webhook-timestamp", "soon"); return h }(), body, now, ErrBadTimestamp},
		{"missing id", func() http.Header { h := headers("evt_1", now, sig); h.Del("webhook-id"); return h }(), body, now, ErrMissingHeaders},
		{"missing signature", func() http.Header { h := headers("evt_1", now, sig); h.Del("webhook-signature"); return h }(), body, now, ErrMissingHeaders},
		{"missing timestamp", func() http.Header { h := headers("evt_1", now, sig); h.Del("webhook-timestamp"); return h }(), body, now, ErrMissingHeaders},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Verify(secret, tt.h, tt.body, tt.now, DefaultTolerance)
			if tt.want == nil && err != nil {
				t.Fatalf("Verify: %v, want success", err)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Verify: %v, want %v", err, tt.want)
			}
		})
	}
}

func TestVerifyBadSecret(t *testing.T) {
	err := Verify("nope", headers("evt_1", time.Now(), "v1,x"), nil, time.Now(), 0)
	if !errors.Is(err, ErrBadSecret) {
		t.Fatalf("err = %v, want ErrBadSecret", err)
	}
}

// A far-future timestamp must be rejected, not overflow into acceptance.
func TestVerifyExtremeTimestamp(t *testing.T) {
	secret, _ := NewSecret()
	for _, ts := range []string{"9223372036854775807", "-9223372036854775808", "0"} {
		h := headers("evt_1", time.Now(), "v1,x")
		h.Set("webhook-timestamp", ts)
		if err := Verify(secret, h, nil, time.Now(), DefaultTolerance); !errors.Is(err, ErrTimestampOutOfTolerance) {
			t.Errorf("timestamp %s: err = %v, want ErrTimestampOutOfTolerance", ts, err)
		}
	}
}
