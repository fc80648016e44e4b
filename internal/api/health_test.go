package api

import (
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/dispatch"
)

// A recovery ramp is named as the hold of a backlog, and only when nothing
// else holds it: it paces work, and a closed, healthy-looking endpoint
// far behind said nothing of why.
func TestARampHoldsOnlyABacklogNothingElseHolds(t *testing.T) {
	now := time.Now()
	active := core.Subscription{State: core.SubActive}
	ramp := dispatch.Health{EndpointCircuit: "closed", HostCircuit: "closed", Recovering: true, RampEndsAt: now.Add(3 * time.Minute)}
	open := ramp
	open.HostCircuit, open.HostRetryAt = "open", now.Add(time.Minute)
	for _, c := range []struct {
		name      string
		h         dispatch.Health
		pending   int
		held      string
		heldUntil time.Time
	}{
		{"a backlog on the ramp", ramp, 10, heldRecovering, ramp.RampEndsAt},
		{"nothing pending on the ramp", ramp, 0, "", time.Time{}},
		{"its host's circuit open again", open, 10, heldHostCircuit, open.HostRetryAt},
		{"catching up after the ramp", dispatch.Health{EndpointCircuit: "closed", HostCircuit: "closed", Recovering: true}, 10, heldRecovering, time.Time{}},
	} {
		held, until := holds(active, c.h, c.pending, now)
		if held != c.held || !until.Equal(c.heldUntil) {
			t.Errorf("%s: held by %q until %v, want %q until %v", c.name, held, until, c.held, c.heldUntil)
		}
	}
}
