package lifecycle

import (
	"testing"
	"time"
)

// The disable reason names the period as the flag gave it: in days when
// it is whole days, else as a duration.
func TestDaysNamesThePeriod(t *testing.T) {
	for d, want := range map[time.Duration]string{
		24 * time.Hour: "1 day", DefaultDisableAfter: "5 days", 36 * time.Hour: "36h0m0s", 90 * time.Minute: "1h30m0s",
	} {
		if got := days(d); got != want {
			t.Errorf("days(%s) = %q, want %q", d, got, want)
		}
	}
}
