package storetest

import (
	"errors"
	"fmt"
	"testing"

	"hookd/internal/store"
)

// testHealth: the health checks succeed on a store that works, and the
// probe write can be repeated. HealthOutage leaves an error that is no
// outage as it is, and one already mapped as it is.
func testHealth(t *testing.T, s store.Store) {
	f := newFx(t, s)
	noErr(t, "HealthPing", s.HealthPing(f.ctx))
	for range 2 {
		noErr(t, "HealthWrite", s.HealthWrite(f.ctx))
	}
	if err := s.HealthOutage(nil); err != nil {
		t.Errorf("HealthOutage(nil) = %v", err)
	}
	own := errors.New("a fault of the call's own")
	if err := s.HealthOutage(own); err != own {
		t.Errorf("HealthOutage(%v) = %v, want it unchanged", own, err)
	}
	for _, mapped := range []error{fmt.Errorf("%w: refused", store.ErrUnavailable), fmt.Errorf("%w: no space", store.ErrFull)} {
		if err := s.HealthOutage(mapped); err != mapped {
			t.Errorf("HealthOutage(%v) = %v, want it unchanged", mapped, err)
		}
	}
}
