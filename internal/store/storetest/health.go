package storetest

import (
	"testing"

	"hookd/internal/store"
)

// testHealth: the health checks succeed on a store that works, and the
// probe write can be repeated.
func testHealth(t *testing.T, s store.Store) {
	f := newFx(t, s)
	noErr(t, "HealthPing", s.HealthPing(f.ctx))
	for range 2 {
		noErr(t, "HealthWrite", s.HealthWrite(f.ctx))
	}
}
