package metrics

import "github.com/prometheus/client_golang/prometheus"

// DispatchStats is the dispatcher's in-memory state at one moment.
type DispatchStats struct {
	Hosts        int // destination hosts held in memory
	Lanes        int // (host, subscription) lanes
	Window       int // deliveries queued in memory, not yet started
	Inflight     int // attempts in flight
	BreakersOpen int // hosts whose circuit is open or half-open
	RateLimited  int // hosts with a 429 rate cut in force
}

// WatchDispatcher exports the dispatcher's state as gauges read at scrape
// time: stats is called once per scrape. Pending work in the store is
// deliberately not exported (a COUNT over the deliveries table per scrape
// costs too much on a big table); per-subscription pending is in the API's
// health call.
func (m *Metrics) WatchDispatcher(stats func() DispatchStats) {
	if m == nil {
		return
	}
	m.reg.MustRegister(&dispatchCollector{stats: stats})
}

var (
	descHosts = prometheus.NewDesc("hookd_dispatch_hosts",
		"Destination hosts the dispatcher holds in memory.", nil, nil)
	descLanes = prometheus.NewDesc("hookd_dispatch_lanes",
		"Per-subscription lanes the dispatcher holds in memory.", nil, nil)
	descWindow = prometheus.NewDesc("hookd_dispatch_window_deliveries",
		"Deliveries queued in memory (the bounded windows), not yet started.", nil, nil)
	descInflight = prometheus.NewDesc("hookd_dispatch_inflight",
		"Delivery attempts in flight.", nil, nil)
	descBreakers = prometheus.NewDesc("hookd_breakers_open",
		"Destination hosts whose circuit breaker is open or half-open.", nil, nil)
	descRateLimited = prometheus.NewDesc("hookd_hosts_rate_limited",
		"Destination hosts sent at a reduced rate after answering 429.", nil, nil)
)

type dispatchCollector struct {
	stats func() DispatchStats
}

func (c *dispatchCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHosts, descLanes, descWindow, descInflight, descBreakers, descRateLimited} {
		ch <- d
	}
}

func (c *dispatchCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	gauge := func(d *prometheus.Desc, v int) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	gauge(descHosts, s.Hosts)
	gauge(descLanes, s.Lanes)
	gauge(descWindow, s.Window)
	gauge(descInflight, s.Inflight)
	gauge(descBreakers, s.BreakersOpen)
	gauge(descRateLimited, s.RateLimited)
}

// WatchShed reports, at each scrape, how many subscriptions ingest sheds.
func (m *Metrics) WatchShed(count func() int) {
	if m == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookd_subscriptions_shed",
		Help: "Subscriptions whose new deliveries ingest writes skipped: backlog over --shed-backlog and not shrinking.",
	}, func() float64 { return float64(count()) }))
}
