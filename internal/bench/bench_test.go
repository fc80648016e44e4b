package bench

import (
	"context"
	"hookd/internal/testenv"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
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
	fl, err := NewLocalFleet(1)
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
