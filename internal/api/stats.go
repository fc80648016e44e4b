package api

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"hookd/internal/store"
)

// How far one stats call reaches: a day of minutes, a month of hours, a
// good year of days; with subscription_ids, at most maxEachIDs of them and
// maxEachBuckets buckets across them (60 minutes of 200 endpoints).
const (
	maxMinuteBuckets = 1440
	maxHourBuckets   = 744
	maxDayBuckets    = 400
	maxEachIDs       = 200
	maxEachBuckets   = 12000
	// maxTypesIncluded bounds include=event_types, one index seek each.
	maxTypesIncluded = 1000
)

type statsJSON struct {
	Granularity string       `json:"granularity"`
	Since       time.Time    `json:"since"`
	Until       time.Time    `json:"until"`
	Data        []bucketJSON `json:"data"`
	// Subscriptions: with subscription_ids, each one's counts apart.
	Subscriptions []eachJSON `json:"subscriptions,omitempty"`
	// EventTypes: with include=event_types, the types the tenant sent.
	EventTypes *[]string `json:"event_types,omitempty"`
}

type countsJSON struct {
	Start     time.Time `json:"start"`
	Delivered int64     `json:"delivered"`
	Failed    int64     `json:"failed"`
	Skipped   int64     `json:"skipped"`
	Pending   int64     `json:"pending"`
	Attempts  int64     `json:"attempts"`
}

type bucketJSON struct {
	countsJSON
	// null where no attempt row is kept: none made, or retention removed them.
	LatencyP50 *float64 `json:"latency_p50_ms"`
	LatencyP99 *float64 `json:"latency_p99_ms"`
}

type eachJSON struct {
	SubscriptionID string       `json:"subscription_id"`
	Data           []countsJSON `json:"data"`
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
// deleted ones included: their deliveries happened. subscription_ids adds
// those subscriptions' counts apart, and include=event_types the types the
// tenant sent: what a list of endpoints draws and judges its rows by, in
// one call.
func (s *Server) tenantStats(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	params, err := statsParams(q, time.Now())
	if err != nil {
		return err
	}
	ids, err := eachParam(q, params)
	if err != nil {
		return err
	}
	withTypes := false
	switch q.Get("include") {
	case "":
	case "event_types":
		withTypes = true
	default:
		return errBadRequest("include", "only event_types can be included")
	}
	if params.TenantID, err = s.tenantFor(r.Context(), p, q.Get("tenant_id")); err != nil {
		return err
	}
	out, err := s.stats(r.Context(), params)
	if err != nil {
		return err
	}
	if len(ids) > 0 {
		each, err := s.Store.DeliveryBucketsEach(r.Context(), params, ids)
		if err != nil {
			return err
		}
		for i, id := range ids {
			e := eachJSON{SubscriptionID: id, Data: make([]countsJSON, len(each[i]))}
			for j, b := range each[i] {
				e.Data[j] = countsOf(b)
			}
			out.Subscriptions = append(out.Subscriptions, e)
		}
	}
	if withTypes {
		types, err := s.Store.EventTypesSent(r.Context(), params.TenantID, "", maxTypesIncluded)
		if err != nil {
			return err
		}
		if types == nil {
			types = []string{}
		}
		out.EventTypes = &types
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// eachParam reads subscription_ids: distinct IDs, comma-separated, in the
// order given, few enough for p's buckets.
func eachParam(q url.Values, p store.DeliveryBucketsParams) ([]string, error) {
	if !q.Has("subscription_ids") {
		return nil, nil
	}
	var ids []string
	seen := map[string]bool{}
	for _, id := range strings.Split(q.Get("subscription_ids"), ",") {
		id = strings.TrimSpace(id)
		if id == "" || len(id) > 64 {
			return nil, errBadRequest("subscription_ids", "must be subscription IDs, comma-separated")
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if len(ids) > maxEachIDs {
		return nil, errBadRequest("subscription_ids", fmt.Sprintf("at most %d; this names %d", maxEachIDs, len(ids)))
	}
	if n := len(ids) * bucketsOf(p); n > maxEachBuckets {
		return nil, errBadRequest("subscription_ids", fmt.Sprintf("at most %d buckets across the subscriptions named; "+
			"%d of %d buckets asks for %d: name fewer, or a shorter range", maxEachBuckets, len(ids), bucketsOf(p), n))
	}
	return ids, nil
}

// bucketsOf is how many buckets p spans.
func bucketsOf(p store.DeliveryBucketsParams) int {
	return int((p.Until.Unix() - p.Since.Unix()) / int64(p.Width/time.Second))
}

func (s *Server) writeStats(w http.ResponseWriter, r *http.Request, p store.DeliveryBucketsParams) error {
	out, err := s.stats(r.Context(), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// stats reads p's buckets as the API answers them.
func (s *Server) stats(ctx context.Context, p store.DeliveryBucketsParams) (statsJSON, error) {
	buckets, err := s.Store.DeliveryBuckets(ctx, p)
	if err != nil {
		return statsJSON{}, err
	}
	out := statsJSON{Granularity: granularities[p.Width], Since: p.Since, Until: p.Until, Data: make([]bucketJSON, len(buckets))}
	for i, b := range buckets {
		out.Data[i] = bucketJSON{countsJSON: countsOf(b)}
		if b.Timed > 0 {
			out.Data[i].LatencyP50, out.Data[i].LatencyP99 = millis(b.LatencyP50), millis(b.LatencyP99)
		}
	}
	return out, nil
}

func countsOf(b store.DeliveryBucket) countsJSON {
	return countsJSON{Start: b.Start, Delivered: b.Delivered, Failed: b.Failed, Skipped: b.Skipped, Pending: b.Pending, Attempts: b.Attempts}
}

var granularities = map[time.Duration]string{store.BucketMinute: "minute", store.BucketHour: "hour", store.BucketDay: "day"}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) *float64 {
	ms := math.Round(float64(d)/float64(time.Microsecond)) / 1000
	return &ms
}

// statsParams reads granularity, since and until: since rounds down and
// until up to whole buckets; left out, until is the end of the current
// bucket and since an hour (minutes), a day (hours) or 30 days (days)
// before it.
func statsParams(q url.Values, now time.Time) (store.DeliveryBucketsParams, error) {
	p := store.DeliveryBucketsParams{Width: store.BucketHour}
	unit, span, most := "hour", 24*time.Hour, maxHourBuckets
	switch q.Get("granularity") {
	case "", "hour":
	case "minute":
		p.Width, unit, span, most = store.BucketMinute, "minute", time.Hour, maxMinuteBuckets
	case "day":
		p.Width, unit, span, most = store.BucketDay, "day", 30*24*time.Hour, maxDayBuckets
	default:
		return p, errBadRequest("granularity", "must be minute, hour or day")
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
	if n := bucketsOf(p); n > most {
		return p, errBadRequest(field, fmt.Sprintf("at most %d buckets of one %s from since to until; this asks for %d", most, unit, n))
	}
	return p, nil
}
