package app

import (
	"net/http"
	"testing"
	"time"

	"hookd/internal/testenv"
)

// A hanging endpoint beside healthy ones, over real HTTP: its breaker
// opens, its health says so, and the healthy endpoints keep delivering.
func TestHangingEndpointOpensItsCircuitAndOthersKeepDelivering(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	hung := testenv.NewReceiver(t)
	hung.Respond = func(n int, w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	hungSub, _ := e.subscribe(e.admin, hung.URL, []string{"hang.*"}, map[string]any{"timeout": "1s"})
	var healthy []*testenv.Receiver
	for range 3 {
		rc := testenv.NewReceiver(t)
		e.subscribe(e.admin, rc.URL, []string{"ok.*"}, nil)
		healthy = append(healthy, rc)
	}
	for range 40 {
		e.post(e.admin, "hang.x", map[string]any{})
	}
	var h map[string]any
	testenv.Eventually(t, 20*time.Second, "the hanging endpoint's circuit opens", func() bool {
		h = e.admin.Must(200, "GET", "/v1/subscriptions/"+hungSub+"/health", nil)
		return h["circuit"] == "open"
	})
	if h["pending"].(float64) == 0 || h["success_rate"].(float64) != 0 {
		t.Errorf("health of the hanging endpoint: %v", h)
	}
	// Attempts admitted before it opened may still be on their way to the
	// endpoint: count once they have timed out (nothing else is in flight).
	testenv.Eventually(t, 5*time.Second, "the attempts admitted before it opened end", func() bool {
		return e.app.dispatch.Stats().Inflight == 0
	})
	attemptsWhenOpen := hung.Count()
	// While it is open, the healthy endpoints take everything at once.
	for i := range 30 {
		e.post(e.admin, "ok.x", map[string]any{"i": i})
	}
	testenv.Eventually(t, 10*time.Second, "healthy endpoints get all 30", func() bool {
		for _, rc := range healthy {
			if rc.Count() < 30 {
				return false
			}
		}
		return true
	})
	if n := hung.Count(); n > attemptsWhenOpen+1 {
		t.Errorf("the open circuit let %d more attempts through, want at most one probe", n-attemptsWhenOpen)
	}
	if attemptsWhenOpen < 20 || attemptsWhenOpen > 30 {
		t.Errorf("circuit opened after %d attempts, want the minimum volume 20 plus what was in flight", attemptsWhenOpen)
	}
}
