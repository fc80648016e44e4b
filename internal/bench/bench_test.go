package bench

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"hookd/internal/testenv"
	"hookd/webhook"
)

func TestHistQuantiles(t *testing.T) {
	var h Hist
	for v := int64(1); v <= 100000; v++ { // 1 µs .. 100 ms, uniform
		h.Add(v)
	}
	for _, c := range []struct{ q, want float64 }{{0.5, 50}, {0.99, 99}, {0.999, 99.9}} {
		got := h.QuantileMs(c.q)
		if math.Abs(got-c.want)/c.want > 0.07 {
			t.Errorf("q%v = %vms, want %vms ±7%%", c.q, got, c.want)
		}
	}
	var empty Hist
	if empty.QuantileMs(0.99) != 0 {
		t.Error("empty histogram quantile not 0")
	}
	h.Add(-5) // clock skew counts as 0
	h.Add(math.MaxInt64)
	if h.N != 100002 {
		t.Errorf("N = %d", h.N)
	}
	for i := 0; i < histBuckets; i++ {
		if histIndex(histUpper(i)) != i {
			t.Fatalf("bucket %d: upper %d maps to %d", i, histUpper(i), histIndex(histUpper(i)))
		}
	}
	round := histFromSparse(h.sparse())
	if round != h {
		t.Error("sparse round trip differs")
	}
}

func TestBitset(t *testing.T) {
	var b bitset
	for _, i := range []uint64{0, 63, 64, 100000} {
		if b.set(i) {
			t.Errorf("%d already set", i)
		}
		if !b.set(i) || !b.has(i) {
			t.Errorf("%d not set", i)
		}
	}
	var got []uint64
	b.each(func(i uint64) { got = append(got, i) })
	if len(got) != 4 || got[3] != 100000 || b.has(5) {
		t.Errorf("each = %v", got)
	}
}

func TestField(t *testing.T) {
	body := []byte(`{"id":"evt_1","data":{"sent_ns":1700000000123456789,"seq":42}}`)
	if v, ok := field(body, "sent_ns"); !ok || v != 1700000000123456789 {
		t.Errorf("sent_ns = %d %v", v, ok)
	}
	if v, ok := field(body, "seq"); !ok || v != 42 {
		t.Errorf("seq = %d %v", v, ok)
	}
	if _, ok := field(body, "nope"); ok {
		t.Error("found a missing field")
	}
}

// A receiver counts distinct deliveries, duplicates and its busiest second.
func TestReceiverCounts(t *testing.T) {
	fl, err := NewLocalFleet(1, false)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	post := func(seq int) int {
		body := `{"data":{"sent_ns":` + itoa(time.Now().UnixNano()) + `,"seq":` + itoa(int64(seq)) + `}}`
		resp, err := http.Post(fl.URLs()[0], "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, seq := range []int{1, 2, 2, 3} {
		if c := post(seq); c != 200 {
			t.Fatalf("status %d", c)
		}
	}
	fl.SetMode(0, ModeDown)
	if c := post(4); c != 503 {
		t.Fatalf("down: status %d", c)
	}
	st, _ := fl.Stats()
	s := st[0]
	if s.Requests != 5 || s.Delivered != 3 || s.Duplicates != 1 || s.MaxPerSec != 3 || s.Hist.N != 3 {
		t.Errorf("stats = %+v", s)
	}
	seen, _ := fl.Seen(0)
	b := bitset{words: seen}
	if !b.has(1) || !b.has(3) || b.has(4) {
		t.Errorf("seen = %b", seen)
	}
	fl.Reset()
	st, _ = fl.Stats()
	if st[0].Requests != 0 {
		t.Error("reset kept counts")
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func TestOptionsDefaults(t *testing.T) {
	o := Options{Scenario: Backlog, Backlog: 1000, Rate: 100}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	if o.Drain != 50*time.Second || o.Concurrency != 32 || o.Fanout != 1 || o.Duration != 10*time.Second {
		t.Errorf("defaults: %+v", o)
	}
	for _, bad := range []Options{{Scenario: "x"}, {Target: "http://10.0.0.1:8080", AdminToken: "t"}, {Target: "http://127.0.0.1:1"}} {
		if err := bad.defaults(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	if _, err := Run(context.Background(), Options{DB: "postgres://127.0.0.1:1/none?connect_timeout=2", Duration: time.Second}); err == nil {
		t.Error("an unreachable postgres:// accepted")
	}
}

// An in-process node on PostgreSQL gets a schema of its own, which is gone
// after the run; the run delivers everything.
func TestThroughputOnPostgres(t *testing.T) {
	db := testenv.PostgresURL(t)
	// A prefix of this test's own, so that other runs on the same server
	// cannot change the count.
	schemaPrefix = "hookd_benchtest_" + strconv.FormatInt(time.Now().UnixNano(), 36) + "_"
	t.Cleanup(func() { schemaPrefix = "hookd_bench_" })
	schemas := func() int {
		return testenv.PostgresCount(t, db, `SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)`, schemaPrefix)
	}
	// Counted while the run is on: the node's schema exists then.
	var watch schemaWatch
	watch.count = schemas
	s, err := Run(t.Context(), Options{DB: db, Scenario: Throughput, Duration: time.Second, BaselineDuration: 500 * time.Millisecond,
		Concurrency: 4, Fanout: 2, Interval: 200 * time.Millisecond, Out: &watch})
	if err != nil {
		t.Fatal(err)
	}
	if s.Lost != 0 || s.DeliveriesTotal == 0 || s.DeliveriesTotal != 2*s.EventsAccepted || s.Duplicates != 0 || !s.Drained {
		t.Fatalf("summary: %+v", s)
	}
	if s.CPUUsPerDelivery != nil {
		t.Errorf("CPU per delivery reported although the database server's CPU is not counted")
	}
	if watch.during != 1 {
		t.Errorf("%d bench schemas during the run, want 1", watch.during)
	}
	if n := schemas(); n != 0 {
		t.Errorf("%d bench schemas left after the run", n)
	}
}

// schemaWatch counts schemas at the first progress line of a run.
type schemaWatch struct {
	count  func() int
	during int
	seen   bool
}

func (w *schemaWatch) Write(p []byte) (int, error) {
	if !w.seen && strings.Contains(string(p), "[throughput]") {
		w.seen, w.during = true, w.count()
	}
	return len(p), nil
}

// A plain fleet gives each receiver a port of its own; a shared one puts
// them all on one port, each at a path of its own.
func TestFleetHosts(t *testing.T) {
	for _, shared := range []bool{false, true} {
		fl, err := NewLocalFleet(3, shared)
		if err != nil {
			t.Fatal(err)
		}
		hosts, paths := map[string]bool{}, map[string]bool{}
		for _, s := range fl.URLs() {
			u, err := url.Parse(s)
			if err != nil || u.Hostname() != "127.0.0.1" {
				t.Fatalf("shared=%v: url %q", shared, s)
			}
			hosts[u.Host], paths[u.Path] = true, true
		}
		fl.Close()
		if shared && (len(hosts) != 1 || len(paths) != 3) {
			t.Errorf("shared: %d hosts and %d paths in %q, want 1 and 3", len(hosts), len(paths), fl.URLs())
		}
		if !shared && len(hosts) != 3 {
			t.Errorf("not shared: %d hosts in %q, want 3", len(hosts), fl.URLs())
		}
	}
}

// On a shared port, modes, secrets and counts belong to one path each, a
// hanging path holds back no other, and Close releases it.
func TestSharedFleetPerPath(t *testing.T) {
	fl, err := NewLocalFleet(3, true)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			fl.Close()
		}
	}()
	urls := fl.URLs()
	secrets := make([]string, 3)
	for i := range secrets {
		if secrets[i], err = webhook.NewSecret(); err != nil {
			t.Fatal(err)
		}
		fl.SetSecret(i, secrets[i])
	}
	client := &http.Client{Timeout: 10 * time.Second}
	// post sends seq to u signed with secret; the first request of each
	// receiver has its signature checked.
	post := func(c *http.Client, u, secret string, seq int) (int, error) {
		now := time.Now()
		body := []byte(`{"data":{"sent_ns":` + itoa(now.UnixNano()) + `,"seq":` + itoa(int64(seq)) + `}}`)
		sig, err := webhook.Sign(secret, "evt_t"+itoa(int64(seq)), now, body)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("POST", u, bytes.NewReader(body))
		req.Header.Set(webhook.HeaderID, "evt_t"+itoa(int64(seq)))
		req.Header.Set(webhook.HeaderTimestamp, itoa(now.Unix()))
		req.Header.Set(webhook.HeaderSignature, sig)
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	mustPost := func(i int, secret string, seq, want int) {
		t.Helper()
		code, err := post(client, urls[i], secret, seq)
		if err != nil || code != want {
			t.Fatalf("POST %s: %d %v, want %d", urls[i], code, err, want)
		}
	}

	fl.SetMode(0, ModeDown)
	mustPost(0, secrets[0], 1, 503)
	mustPost(1, secrets[0], 1, 200) // signed with another path's secret
	mustPost(1, secrets[1], 2, 200)
	mustPost(1, secrets[1], 2, 200)
	u, _ := url.Parse(urls[0])
	if resp, err := client.Post("http://"+u.Host+"/r3", "application/json", strings.NewReader("{}")); err != nil || resp.StatusCode != 404 {
		t.Fatalf("unknown path: %v %v, want 404", resp, err)
	} else {
		resp.Body.Close()
	}
	st, _ := fl.Stats()
	if s := st[0]; s.Requests != 1 || s.Delivered != 0 || s.SigChecked != 0 {
		t.Errorf("/r0 (down): %+v", s)
	}
	if s := st[1]; s.Requests != 3 || s.Delivered != 2 || s.Duplicates != 1 || s.SigChecked != 1 || s.SigFailed != 1 {
		t.Errorf("/r1: %+v", s)
	}
	if s := st[2]; s.Requests != 0 {
		t.Errorf("/r2 got requests: %+v", s)
	}
	if seen, _ := fl.Seen(1); !(&bitset{words: seen}).has(2) {
		t.Error("/r1 has not seen seq 2")
	}
	if seen, _ := fl.Seen(0); (&bitset{words: seen}).has(1) {
		t.Error("/r0 (down) counts seq 1 as seen")
	}

	// /r2 hangs on its own connection; /r0 and /r1 still answer at once.
	fl.SetMode(2, ModeHang)
	fl.SetMode(0, ModeOK)
	hung := make(chan error, 1)
	go func() {
		_, err := post(&http.Client{}, urls[2], secrets[2], 3)
		hung <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); ; {
		st, _ := fl.Stats()
		if st[2].Requests == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hanging request never reached /r2")
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
	mustPost(0, secrets[0], 4, 200)
	mustPost(1, secrets[1], 5, 200)
	select {
	case err := <-hung:
		t.Fatalf("/r2 answered while hanging: %v", err)
	default:
	}
	fl.Close()
	closed = true
	select {
	case <-hung:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not release the hanging request")
	}
}

// A short run with every receiver on one port delivers every accepted
// event to each of them.
func TestThroughputSharedHost(t *testing.T) {
	s, err := Run(t.Context(), Options{Scenario: Throughput, SharedHost: true, Duration: time.Second,
		BaselineDuration: 300 * time.Millisecond, Concurrency: 4, Fanout: 3, Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !s.SharedHost || s.Lost != 0 || !s.Drained || s.EventsAccepted == 0 || s.DeliveriesTotal != 3*s.EventsAccepted ||
		s.Duplicates != 0 || s.SignatureFailures != 0 || s.BaselineDeliveriesPS == nil || *s.BaselineDeliveriesPS <= 0 {
		t.Fatalf("summary: %+v", s)
	}
}
