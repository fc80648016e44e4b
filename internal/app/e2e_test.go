package app

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"hookd/internal/testenv"
	"hookd/webhook"
)

const adminToken = "admin-test-token"

type env struct {
	t     *testing.T
	app   *App
	base  string
	admin *testenv.Client
}

// start runs a real hookd node on a loopback port with a fresh SQLite file.
// loopback opens 127.0.0.0/8 and ::1 past the SSRF guard, as tests need.
func start(t *testing.T, loopback bool) *env {
	t.Helper()
	var allow []netip.Prefix
	if loopback {
		allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	}
	return serve(t, Config{
		DB: filepath.Join(t.TempDir(), "hookd.db"), AdminToken: adminToken,
		AllowNetworks: allow, Version: "test",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
}

// serve opens a node on cfg, serves it on a loopback port and shuts it
// down when the test ends.
func serve(t *testing.T, cfg Config) *env {
	t.Helper()
	a, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go a.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a.Shutdown(ctx)
	})
	base := "http://" + ln.Addr().String()
	return &env{t: t, app: a, base: base, admin: &testenv.Client{T: t, Base: base, Token: adminToken}}
}

// subscribe registers url for event types with an optional retry schedule
// and returns the subscription's ID and secret.
func (e *env) subscribe(c *testenv.Client, url string, types []string, extra map[string]any) (string, string) {
	e.t.Helper()
	body := map[string]any{"url": url, "event_types": types}
	for k, v := range extra {
		body[k] = v
	}
	out := c.Must(http.StatusCreated, "POST", "/v1/subscriptions", body)
	return out["id"].(string), out["secret"].(string)
}

func (e *env) post(c *testenv.Client, typ string, payload any) string {
	e.t.Helper()
	out := c.Must(http.StatusAccepted, "POST", "/v1/events", map[string]any{"type": typ, "payload": payload})
	return out["id"].(string)
}

// waitDelivery polls a delivery until its state is want.
func (e *env) waitDelivery(id, want string, within time.Duration) map[string]any {
	e.t.Helper()
	var last map[string]any
	testenv.Eventually(e.t, within, "delivery "+id+" to become "+want, func() bool {
		last = e.admin.Must(200, "GET", "/v1/deliveries/"+id, nil)
		return last["state"] == want
	})
	return last
}

// onlyDelivery returns the ID of the single delivery of an event.
func (e *env) onlyDelivery(eventID string) string {
	e.t.Helper()
	ev := e.admin.Must(200, "GET", "/v1/events/"+eventID, nil)
	ds := ev["deliveries"].([]any)
	if len(ds) != 1 {
		e.t.Fatalf("event %s has %d deliveries, want 1", eventID, len(ds))
	}
	return ds[0].(map[string]any)["id"].(string)
}

type envelope struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Timestamp string          `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// independentSignature computes the Standard Webhooks signature without
// the webhook package, so a bug shared by signer and verifier shows.
func independentSignature(t *testing.T, secret, id, ts string, body []byte) string {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s.%s.%s", id, ts, body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func TestEveryEventDeliveredOnceToEachMatchingSubscription(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	orders, payments, other := testenv.NewReceiver(t), testenv.NewReceiver(t), testenv.NewReceiver(t)
	_, ordersSecret := e.subscribe(e.admin, orders.URL+"/hook", []string{"order.*"}, nil)
	_, paymentsSecret := e.subscribe(e.admin, payments.URL, []string{"payment.succeeded", "order.shipped"}, nil)
	e.subscribe(e.admin, other.URL, []string{"invoice.paid"}, nil)

	want := map[string][]string{} // receiver URL -> event IDs
	var mu sync.Mutex
	var wg sync.WaitGroup
	types := []string{"order.created", "order.shipped", "payment.succeeded", "payment.failed"}
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			typ := types[i%len(types)]
			id := e.post(e.admin, typ, map[string]any{"n": i})
			mu.Lock()
			defer mu.Unlock()
			if strings.HasPrefix(typ, "order.") {
				want[orders.URL] = append(want[orders.URL], id)
			}
			if typ == "payment.succeeded" || typ == "order.shipped" {
				want[payments.URL] = append(want[payments.URL], id)
			}
		}()
	}
	wg.Wait()
	testenv.Eventually(t, 10*time.Second, "all deliveries arrive", func() bool {
		return orders.Count() >= len(want[orders.URL]) && payments.Count() >= len(want[payments.URL])
	})

	for _, rc := range []struct {
		r      *testenv.Receiver
		secret string
	}{{orders, ordersSecret}, {payments, paymentsSecret}} {
		got := map[string]int{}
		for _, req := range rc.r.Requests() {
			id := req.Header.Get("webhook-id")
			got[id]++
			if err := webhook.Verify(rc.secret, req.Header, req.Body, time.Now(), webhook.DefaultTolerance); err != nil {
				t.Errorf("webhook.Verify on %s: %v", id, err)
			}
			ts := req.Header.Get("webhook-timestamp")
			if sig := independentSignature(t, rc.secret, id, ts, req.Body); req.Header.Get("webhook-signature") != sig {
				t.Errorf("signature %q, independent HMAC says %q", req.Header.Get("webhook-signature"), sig)
			}
			if ct := req.Header.Get("content-type"); ct != "application/json" {
				t.Errorf("content-type %q", ct)
			}
			if ua := req.Header.Get("user-agent"); ua != "hookd/test" {
				t.Errorf("user-agent %q", ua)
			}
			var env envelope
			if err := json.Unmarshal(req.Body, &env); err != nil || env.ID != id || env.Type == "" || env.Timestamp == "" || len(env.Data) == 0 {
				t.Errorf("body %s: envelope wrong (err %v)", req.Body, err)
			}
		}
		ids := want[rc.r.URL]
		if len(got) != len(ids) {
			t.Errorf("%s got %d distinct events, want %d", rc.r.URL, len(got), len(ids))
		}
		for _, id := range ids {
			if got[id] != 1 {
				t.Errorf("%s got event %s %d times, want once", rc.r.URL, id, got[id])
			}
		}
	}
	if n := other.Count(); n != 0 {
		t.Errorf("non-matching subscription got %d requests", n)
	}
}

func TestRetriesOnScheduleThenDelivers(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	rc.Respond = testenv.Statuses(500, 500, 200)
	e.subscribe(e.admin, rc.URL, []string{"*"}, map[string]any{"retry_schedule": []string{"1s", "2s"}})
	dl := e.onlyDelivery(e.post(e.admin, "a.b", map[string]any{}))
	got := e.waitDelivery(dl, "delivered", 10*time.Second)

	reqs := rc.Requests()
	if len(reqs) != 3 || got["attempt_count"].(float64) != 3 {
		t.Fatalf("%d requests, attempt_count %v; want 3 and 3", len(reqs), got["attempt_count"])
	}
	// The schedule's spacing, less the 20% jitter.
	for i, min := range []time.Duration{800 * time.Millisecond, 1600 * time.Millisecond} {
		if gap := reqs[i+1].At.Sub(reqs[i].At); gap < min {
			t.Errorf("gap before try %d is %s, want at least %s", i+2, gap, min)
		}
	}
	attempts := got["attempts"].([]any)
	for i, want := range []float64{500, 500, 200} {
		a := attempts[i].(map[string]any)
		if a["n"].(float64) != float64(i+1) || a["status_code"].(float64) != want {
			t.Errorf("attempt %d: %v, want status %v", i+1, a, want)
		}
	}
	for _, r := range reqs[1:] {
		if r.Header.Get("webhook-id") != reqs[0].Header.Get("webhook-id") {
			t.Error("webhook-id changed between retries")
		}
	}
}

func TestClientErrorFailsAtOnce(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	rc.Respond = func(n int, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(400)
		io.WriteString(w, `{"error":"bad signature"}`)
	}
	e.subscribe(e.admin, rc.URL, []string{"*"}, map[string]any{"retry_schedule": []string{"1s"}})
	dl := e.onlyDelivery(e.post(e.admin, "a.b", map[string]any{}))
	got := e.waitDelivery(dl, "failed", 10*time.Second)
	if got["attempt_count"].(float64) != 1 || rc.Count() != 1 {
		t.Fatalf("attempt_count %v, requests %d; want 1 and 1", got["attempt_count"], rc.Count())
	}
	a := got["attempts"].([]any)[0].(map[string]any)
	if a["status_code"].(float64) != 400 || a["response"] != `{"error":"bad signature"}` {
		t.Errorf("attempt recorded %v", a)
	}
}

func TestGoneDisablesSubscription(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	rc.Respond = testenv.Statuses(410)
	sub, _ := e.subscribe(e.admin, rc.URL, []string{"*"}, nil)
	e.waitDelivery(e.onlyDelivery(e.post(e.admin, "a.b", map[string]any{})), "failed", 10*time.Second)
	var s map[string]any
	testenv.Eventually(t, 5*time.Second, "subscription disabled", func() bool {
		s = e.admin.Must(200, "GET", "/v1/subscriptions/"+sub, nil)
		return s["state"] == "disabled"
	})
	if !strings.Contains(s["disabled_reason"].(string), "410") {
		t.Errorf("disabled_reason %q", s["disabled_reason"])
	}
	// Later events are kept, skipped, never sent.
	ev := e.post(e.admin, "a.b", map[string]any{})
	d := e.admin.Must(200, "GET", "/v1/deliveries/"+e.onlyDelivery(ev), nil)
	if d["state"] != "skipped" || rc.Count() != 1 {
		t.Errorf("after disable: state %v, requests %d; want skipped and 1", d["state"], rc.Count())
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	rc.Respond = func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 0 {
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(429)
			return
		}
		w.WriteHeader(200)
	}
	e.subscribe(e.admin, rc.URL, []string{"*"}, map[string]any{"retry_schedule": []string{"1s"}})
	e.waitDelivery(e.onlyDelivery(e.post(e.admin, "a.b", map[string]any{})), "delivered", 15*time.Second)
	reqs := rc.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	if gap := reqs[1].At.Sub(reqs[0].At); gap < 3*time.Second {
		t.Errorf("retry came %s after a 429 with Retry-After: 3", gap)
	}
}

func TestRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	target := testenv.NewReceiver(t)
	rc := testenv.NewReceiver(t)
	rc.Respond = func(n int, w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusFound)
	}
	e.subscribe(e.admin, rc.URL, []string{"*"}, nil)
	got := e.waitDelivery(e.onlyDelivery(e.post(e.admin, "a.b", map[string]any{})), "failed", 10*time.Second)
	if got["last_status"].(float64) != 302 || target.Count() != 0 || rc.Count() != 1 {
		t.Errorf("last_status %v, redirect target got %d, endpoint got %d; want 302, 0, 1",
			got["last_status"], target.Count(), rc.Count())
	}
}

func TestReplayResendsSameIDSignedAfresh(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	_, secret := e.subscribe(e.admin, rc.URL, []string{"*"}, nil)
	ev := e.post(e.admin, "a.b", map[string]any{"k": "v"})
	dl := e.onlyDelivery(ev)
	e.waitDelivery(dl, "delivered", 10*time.Second)
	first := rc.Requests()[0]
	firstTS, _ := strconv.ParseInt(first.Header.Get("webhook-timestamp"), 10, 64)
	// webhook-timestamp has whole seconds: let the clock pass the first one.
	testenv.Eventually(t, 2*time.Second, "clock passes the first timestamp", func() bool { return time.Now().Unix() > firstTS })

	e.admin.Must(http.StatusAccepted, "POST", "/v1/deliveries/"+dl+"/replay", nil)
	got := e.waitDelivery(dl, "delivered", 10*time.Second)
	testenv.Eventually(t, 5*time.Second, "replay arrives", func() bool { return rc.Count() == 2 })
	second := rc.Requests()[1]
	if second.Header.Get("webhook-id") != ev || first.Header.Get("webhook-id") != ev {
		t.Errorf("webhook-id %q then %q, want %q both times", first.Header.Get("webhook-id"), second.Header.Get("webhook-id"), ev)
	}
	secondTS, _ := strconv.ParseInt(second.Header.Get("webhook-timestamp"), 10, 64)
	if secondTS <= firstTS {
		t.Errorf("replay timestamp %d not after the first %d", secondTS, firstTS)
	}
	if err := webhook.Verify(secret, second.Header, second.Body, time.Now(), webhook.DefaultTolerance); err != nil {
		t.Errorf("replay signature: %v", err)
	}
	if got["attempt_count"].(float64) != 2 {
		t.Errorf("attempt_count %v after replay, want 2", got["attempt_count"])
	}
	// An unknown delivery answers 404.
	if st, _ := e.admin.Do("POST", "/v1/deliveries/dlv_nope/replay", nil); st != 404 {
		t.Errorf("replay of unknown delivery: %d, want 404", st)
	}
}
