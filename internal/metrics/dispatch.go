package metrics

import "github.com/prometheus/client_golang/prometheus"

// DispatchStats is the dispatcher's in-memory state at one moment.
type DispatchStats struct {
	Hosts                int // destination hosts held in memory
	Lanes                int // (host, subscription) lanes: endpoints
	Window               int // deliveries queued in memory, not yet started
	Inflight             int // attempts in flight
	BreakersOpen         int // hosts whose circuit is open or half-open
	EndpointBreakersOpen int // endpoints whose own circuit is open or half-open
	RateLimited          int // endpoints with a 429 rate cut in force
	HostsPaused          int // hosts held by a Retry-After two of their endpoints were given
	EndpointsPaused      int // endpoints held by a Retry-After of their own
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
		"Destination hosts whose own circuit breaker is open or half-open (host-wide failures).", nil, nil)
	descEndpointBreakers = prometheus.NewDesc("hookd_endpoint_breakers_open",
		"Endpoints (subscriptions) whose own circuit breaker is open or half-open.", nil, nil)
	descRateLimited = prometheus.NewDesc("hookd_endpoints_rate_limited",
		"Endpoints sent at a reduced rate after answering 429.", nil, nil)
	descHostsPaused = prometheus.NewDesc("hookd_hosts_paused",
		"Destination hosts held by a Retry-After given to two or more of their endpoints within a minute.", nil, nil)
	descEndpointsPaused = prometheus.NewDesc("hookd_endpoints_paused",
		"Endpoints held by a Retry-After of their own.", nil, nil)
)

type dispatchCollector struct {
	stats func() DispatchStats
}

func (c *dispatchCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHosts, descLanes, descWindow, descInflight, descBreakers,
		descEndpointBreakers, descRateLimited, descHostsPaused, descEndpointsPaused} {
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
	gauge(descEndpointBreakers, s.EndpointBreakersOpen)
	gauge(descRateLimited, s.RateLimited)
	gauge(descHostsPaused, s.HostsPaused)
	gauge(descEndpointsPaused, s.EndpointsPaused)
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
