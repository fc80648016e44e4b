package api

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"time"

	"hookd/internal/store"
)

// How far one stats call reaches: a month of hours, a good year of days.
const (
	maxHourBuckets = 744
	maxDayBuckets  = 400
)

type statsJSON struct {
	Granularity string       `json:"granularity"`
	Since       time.Time    `json:"since"`
	Until       time.Time    `json:"until"`
	Data        []bucketJSON `json:"data"`
}

type bucketJSON struct {
	Start     time.Time `json:"start"`
	Delivered int64     `json:"delivered"`
	Failed    int64     `json:"failed"`
	Skipped   int64     `json:"skipped"`
	Pending   int64     `json:"pending"`
	Attempts  int64     `json:"attempts"`
	// null where no attempt row is kept: none made, or retention removed them.
	LatencyP50 *float64 `json:"latency_p50_ms"`
	LatencyP99 *float64 `json:"latency_p99_ms"`
}

// subscriptionStats counts a live subscription's deliveries per hour or day.
func (s *Server) subscriptionStats(w http.ResponseWriter, r *http.Request, p principal) error {
	params, err := statsParams(r.URL.Query(), time.Now())
	if err != nil {
		return err
	}
	sub, err := s.Store.SubscriptionGet(r.Context(), p.scope(), r.PathValue("id"))
	if err != nil {
		return err
	}
	params.SubscriptionID, params.TenantID = sub.ID, sub.TenantID
	return s.writeStats(w, r, params)
}

// tenantStats counts the deliveries of all of a tenant's subscriptions,
// deleted ones included: their deliveries happened.
func (s *Server) tenantStats(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	params, err := statsParams(q, time.Now())
	if err != nil {
		return err
	}
	if params.TenantID, err = s.tenantFor(r.Context(), p, q.Get("tenant_id")); err != nil {
		return err
	}
	return s.writeStats(w, r, params)
}

func (s *Server) writeStats(w http.ResponseWriter, r *http.Request, p store.DeliveryBucketsParams) error {
	buckets, err := s.Store.DeliveryBuckets(r.Context(), p)
	if err != nil {
		return err
	}
	out := statsJSON{Granularity: "hour", Since: p.Since, Until: p.Until, Data: make([]bucketJSON, len(buckets))}
	if p.Width == store.BucketDay {
		out.Granularity = "day"
	}
	for i, b := range buckets {
		out.Data[i] = bucketJSON{Start: b.Start, Delivered: b.Delivered, Failed: b.Failed, Skipped: b.Skipped,
			Pending: b.Pending, Attempts: b.Attempts}
		if b.Timed > 0 {
			out.Data[i].LatencyP50, out.Data[i].LatencyP99 = millis(b.LatencyP50), millis(b.LatencyP99)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) *float64 {
	ms := math.Round(float64(d)/float64(time.Microsecond)) / 1000
	return &ms
}

// statsParams reads granularity, since and until: since rounds down and
// until up to whole buckets; left out, until is the end of the current
// bucket and since a day (hours) or 30 days (days) before it.
func statsParams(q url.Values, now time.Time) (store.DeliveryBucketsParams, error) {
	p := store.DeliveryBucketsParams{Width: store.BucketHour}
	unit, span, most := "hour", 24*time.Hour, maxHourBuckets
	switch q.Get("granularity") {
	case "", "hour":
	case "day":
		p.Width, unit, span, most = store.BucketDay, "day", 30*24*time.Hour, maxDayBuckets
	default:
		return p, errBadRequest("granularity", "must be hour or day")
	}
	since, err := queryTime(q, "since")
	if err != nil {
		return p, err
	}
	until, err := queryTime(q, "until")
	if err != nil {
		return p, err
	}
	// A range is blamed on until when it was given, else on since.
	field, order := "until", "must be after since"
	if until.IsZero() {
		field, order = "since", "must be before until (now, when left out)"
		until = now.UTC()
	}
	p.Until = until.Truncate(p.Width)
	if p.Until.Before(until) {
		p.Until = p.Until.Add(p.Width)
	}
	if p.Until.Year() > 9999 {
		return p, errBadRequest("until", "must be before 9999-12-31T00:00:00Z")
	}
	if since.IsZero() {
		since = p.Until.Add(-span)
		if epoch := time.Unix(0, 0).UTC(); since.Before(epoch) {
			since = epoch
		}
	}
	p.Since = since.Truncate(p.Width)
	if !p.Since.Before(p.Until) {
		return p, errBadRequest(field, order)
	}
	if n := (p.Until.Unix() - p.Since.Unix()) / int64(p.Width/time.Second); n > int64(most) {
		return p, errBadRequest(field, fmt.Sprintf("at most %d buckets of one %s from since to until; this asks for %d", most, unit, n))
	}
	return p, nil
}
