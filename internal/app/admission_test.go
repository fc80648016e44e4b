package app

import (
	"encoding/json"
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
	if h["endpoint_circuit"] != "open" || h["host_circuit"] != "closed" {
		t.Errorf("a hanging endpoint on a host of its own opens its own circuit, not the host's: %v", h)
	}
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

// Two tenants on one host:port, told apart by path (a gateway): tenant X's
// endpoint answers 503 to everything and tenant Y's deliveries on the same
// host arrive with their normal lag. When the host had one circuit, X's
// 503s opened it and Y's first delivery waited 29 s.
func TestOneTenantsFailingEndpointCostsItsHostNeighboursNothing(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	rc.Respond = func(_ int, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/status/503" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}
	client := func(tenant string) *testenv.Client {
		key := e.admin.Must(http.StatusCreated, "POST", "/v1/tenants", map[string]any{"id": tenant})["api_key"].(string)
		return &testenv.Client{T: t, Base: e.base, Token: key}
	}
	x, y := client("tenant-x"), client("tenant-y")
	subX, _ := e.subscribe(x, rc.URL+"/status/503", []string{"x.*"}, map[string]any{"retry_schedule": []string{"1s", "1s", "1s"}})
	subY, _ := e.subscribe(y, rc.URL+"/victim", []string{"y.*"}, nil)
	for i := range 25 {
		e.post(x, "x.thing", map[string]any{"i": i})
	}
	health := func(c *testenv.Client, sub string) map[string]any {
		return c.Must(http.StatusOK, "GET", "/v1/subscriptions/"+sub+"/health", nil)
	}
	testenv.Eventually(t, 20*time.Second, "X's endpoint's own circuit opens", func() bool {
		return health(x, subX)["endpoint_circuit"] == "open"
	})
	if h := health(x, subX); h["host_circuit"] != "closed" || h["circuit"] != "open" {
		t.Errorf("X's health: host_circuit %v, circuit %v; want the host closed, X held by its own circuit", h["host_circuit"], h["circuit"])
	}
	if h := health(y, subY); h["circuit"] != "closed" || h["host_circuit"] != "closed" || h["paused_until"] != nil {
		t.Errorf("Y's health beside a failing neighbour: %v", h)
	}

	// X keeps posting while Y's events go out.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				x.Do("POST", "/v1/events", map[string]any{"type": "x.thing", "payload": map[string]any{}})
			}
		}
	}()
	posted := map[int]time.Time{}
	for i := range 20 {
		posted[i] = time.Now()
		e.post(y, "y.thing", map[string]any{"y": i})
	}
	arrived := func() map[int]time.Time {
		got := map[int]time.Time{}
		for _, r := range rc.Requests() {
			var env struct {
				Data struct {
					Y *int `json:"y"`
				} `json:"data"`
			}
			if json.Unmarshal(r.Body, &env) == nil && env.Data.Y != nil {
				if _, seen := got[*env.Data.Y]; !seen {
					got[*env.Data.Y] = r.At
				}
			}
		}
		return got
	}
	testenv.Eventually(t, 40*time.Second, "Y's 20 deliveries arrive", func() bool { return len(arrived()) == 20 })
	close(stop)
	<-done
	var worst time.Duration
	for i, at := range arrived() {
		worst = max(worst, at.Sub(posted[i]))
	}
	t.Logf("Y's slowest delivery beside X's failing endpoint: %s", worst)
	if worst > 2*time.Second {
		t.Errorf("Y's slowest delivery took %s beside X's failing endpoint on the same host", worst)
	}
}
