package store

import (
	"testing"

	"hookd/internal/core"
	"hookd/internal/seal"
)

// What opening one subscription costs when the registry (re)loads: its
// secret, a previous secret and two headers.
func BenchmarkOpenSubscription(b *testing.B) {
	k, err := seal.Parse(seal.NewKey())
	if err != nil {
		b.Fatal(err)
	}
	sub := core.Subscription{ID: core.NewID("sub"), Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		PrevSecret: "whsec_c2VjcmV0LXRoYXQtd2FzLXJvdGF0ZWQtb3V0",
		Headers:    map[string]string{"Authorization": "Bearer sk_live_0123456789", "X-Api-Key": "k-0123456789"}}
	sealed, err := SealSubscription(k, sub)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var s core.Subscription
		s.ID = sub.ID
		if err := OpenSubscription(k, &s, sealed); err != nil {
			b.Fatal(err)
		}
	}
}
