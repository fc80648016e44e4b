package api

import (
	"slices"
	"testing"

	"hookd/internal/metrics"
)

// Every route portalDenied names is one New registers: a pattern spelt
// differently from its route would leave that route open to portal
// sessions without a word.
func TestPortalDeniedNamesRegisteredRoutes(t *testing.T) {
	s := New(Config{Metrics: metrics.New()})
	for pattern := range portalDenied {
		if !slices.Contains(s.mux.patterns, pattern) {
			t.Errorf("portalDenied names %q, which New does not register", pattern)
		}
	}
}
