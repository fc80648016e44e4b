package webhook

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func BenchmarkSign(b *testing.B) {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body := []byte(`{"id":"evt_01","type":"order.created","timestamp":"2026-01-01T00:00:00Z","data":{"order":"o_1","total":4200,"note":"` + strings.Repeat("x", 400) + `"}}`)
	ts := time.Now()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Sign(secret, "evt_01", ts, body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body := []byte(`{"id":"evt_01","type":"order.created","data":{}}`)
	now := time.Now()
	sig, err := Sign(secret, "evt_01", now, body)
	if err != nil {
		b.Fatal(err)
	}
	h := http.Header{}
	h.Set(HeaderID, "evt_01")
	h.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	h.Set(HeaderSignature, sig)
	b.ReportAllocs()
	for b.Loop() {
		if err := Verify(secret, h, body, now, DefaultTolerance); err != nil {
			b.Fatal(err)
		}
	}
}
