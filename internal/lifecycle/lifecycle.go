// Package lifecycle tells an endpoint's owner what happens to it, and acts
// on what days of failures mean. It emits hookd's own operational events
// (hookd.subscription.failing, .recovered, .disabled, .shedding,
// .shedding_ended; hookd.replay.completed)
// into the owner's tenant, as ordinary events: durable, signed, retried,
// delivered only to subscriptions whose patterns name them and never to the
// one they are about. And it disables a subscription every attempt of which
// has failed for DisableAfter, with at least one attempt a day.
//
// What is failing lives in the store (failing_since, kept by the result
// writes; the alert state, moved once per change), so nodes sharing it send
// each alert once, and a restart forgets nothing. A disable and a finished
// replay record the event they owe in their own transaction (store.Notice)
// until it is written, under an idempotency key of the decision: sent at
// least once, through a failed write or a crash, and written once.
package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"hookd/internal/outage"
	"log/slog"
	"sync"
	"time"

	"hookd/internal/core"
	"hookd/internal/ingest"
	"hookd/internal/shed"
	"hookd/internal/store"
	"hookd/internal/subs"
)

// The operational event types.
const (
	TypeFailing         = core.ReservedPrefix + "subscription.failing"
	TypeRecovered       = core.ReservedPrefix + "subscription.recovered"
	TypeDisabled        = core.ReservedPrefix + "subscription.disabled"
	TypeShedding        = core.ReservedPrefix + "subscription.shedding"
	TypeSheddingEnded   = core.ReservedPrefix + "subscription.shedding_ended"
	TypeReplayCompleted = core.ReservedPrefix + "replay.completed"
	TypeTest            = core.ReservedPrefix + "test"
)

const (
	// DefaultDisableAfter is how long every attempt must fail before the
	// subscription is disabled (as Svix does).
	DefaultDisableAfter = 5 * 24 * time.Hour
	// alertEvery bounds the failing alerts of one subscription: a flapping
	// endpoint tells its owner at most once an hour (and recovers once).
	alertEvery = time.Hour
	// dailyAttempt: failing for days means attempts every day; a longer
	// gap starts the count again (the store resets failing_since).
	dailyAttempt = 24 * time.Hour
	scanEvery    = time.Minute
)

// Submitter takes an event into the outbox: *ingest.Ingester.
type Submitter interface {
	Submit(ctx context.Context, ev core.Event) (ingest.Result, error)
}

type Config struct {
	Store  store.Store
	Subs   *subs.Service
	Ingest Submitter
	// Owns says whether this node dispatches a host: only its owner
	// disables a subscription, so one node does it, once.
	Owns func(host string) bool
	// DisableAfter: 0 never disables.
	DisableAfter time.Duration
	Log          *slog.Logger
	// Outage is told of store calls failed in an outage, which it logs
	// once for the node (nil: every failure is logged).
	Outage *outage.Tracker
	// Shedding says whether ingest sheds a subscription's new deliveries
	// now (nil: never): its recovery is told once that ends, not while its
	// events are still skipped.
	Shedding func(subID string) bool
}

// Lifecycle runs one scan a minute (recoveries, auto-disable) and sends
// the alerts the dispatcher reports.
type Lifecycle struct {
	cfg  Config
	quit chan struct{}
	wg   sync.WaitGroup
}

func New(cfg Config) *Lifecycle {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Owns == nil {
		cfg.Owns = func(string) bool { return true }
	}
	return &Lifecycle{cfg: cfg, quit: make(chan struct{})}
}

// Start begins the scans; Stop ends them and waits.
func (l *Lifecycle) Start() {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		t := time.NewTicker(scanEvery)
		defer t.Stop()
		for {
			select {
			case <-l.quit:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), scanEvery)
				l.Scan(ctx, time.Now())
				cancel()
			}
		}
	}()
}

func (l *Lifecycle) Stop() {
	close(l.quit)
	l.wg.Wait()
}

// Failure is what the dispatcher saw: why the endpoint counts as failing
// (its circuit opened, a delivery failed) and the attempt that showed it.
type Failure struct {
	SubscriptionID string
	Reason         string // "circuit_open" or "delivery_failed"
	Status         int
	Error          string
	At             time.Time
}

// Failing alerts the owner that an endpoint fails, unless it was alerted
// failing within the hour or has not recovered since.
func (l *Lifecycle) Failing(ctx context.Context, f Failure) {
	sub, ok := l.cfg.Subs.Registry().Get(f.SubscriptionID)
	if !ok {
		return
	}
	began := time.Now()
	moved, err := l.cfg.Store.SubscriptionAlert(ctx, sub.ID, true, began.UTC(), alertEvery)
	if err != nil || !moved {
		l.logErr("noting a failing alert", sub.ID, began, err)
		return
	}
	began = time.Now()
	st, err := l.cfg.Store.DeliveryStats(ctx, "", sub.ID)
	l.logErr("reading a failing subscription's figures", sub.ID, began, err)
	p := failingPayload(sub, f, st)
	if l.emit(ctx, core.Event{TenantID: sub.TenantID, Type: TypeFailing, About: sub.ID}, p) != nil {
		// Not sent: let the next sign of failing send it (an hour on).
		began := time.Now()
		_, err := l.cfg.Store.SubscriptionAlert(ctx, sub.ID, false, began.UTC(), alertEvery)
		l.logErr("undoing a failing alert not sent", sub.ID, began, err)
	}
}

// Disable turns a subscription off for reason (the dispatcher's, after a
// 410; or the scan's) and, if that changed it, tells the owner. The event
// is recorded with the disable (store.SubscriptionDisable) and sent now;
// if that fails, the scan sends it.
func (l *Lifecycle) Disable(ctx context.Context, subID, reason string) error {
	var figures store.DeliveryStats // the failures behind the decision
	if st, err := l.cfg.Store.DeliveryStats(ctx, "", subID); err == nil {
		figures = st
	}
	var payload []byte
	sub, changed, err := l.cfg.Subs.DisableWithNotice(ctx, subID, reason, func(s core.Subscription) ([]byte, error) {
		var err error
		payload, err = json.Marshal(disabledPayload(s, figures))
		return payload, err
	})
	if err != nil || !changed {
		return err
	}
	l.send(ctx, store.Notice{SubscriptionID: sub.ID, TenantID: sub.TenantID, Host: sub.Host, URL: sub.URL, Disabled: payload})
	return nil
}

// Shed tells the owner that ingest began (or ended) shedding the
// subscription's new deliveries: written skipped, they are not sent unless
// replayed, and an endpoint that is slow but never fails has had no other
// word of it. Every node decides alike from the store's counts, each at
// its own reading: the store keeps the first beginning's time
// (SubscriptionShedSet), so the first node to begin tells, and the first
// to end tells with that time. An event that could not be written is
// logged, not retried.
func (l *Lifecycle) Shed(ctx context.Context, c shed.Change, threshold int) {
	began := time.Now()
	ended, set := !c.Ended.IsZero(), c.Since
	if ended {
		set = time.Time{}
	}
	was, err := l.cfg.Store.SubscriptionShedSet(ctx, c.SubscriptionID, set)
	if err != nil {
		l.logErr("keeping a subscription's shedding", c.SubscriptionID, began, err)
		return
	}
	// A beginning tells if nothing was kept, an end if something was;
	// otherwise another node (or this one before a restart) told.
	sub, ok := l.cfg.Subs.Registry().Get(c.SubscriptionID)
	if was.IsZero() == ended || !ok {
		return
	}
	typ, p := TypeShedding, sheddingPayload(sub, c, threshold)
	if ended {
		c.Since = was
		typ, p = TypeSheddingEnded, sheddingEndedPayload(sub, c)
	}
	l.emit(ctx, core.Event{TenantID: sub.TenantID, Type: typ, About: sub.ID,
		IdempotencyKey: typ + ":" + sub.ID + ":" + c.Since.UTC().Format(time.RFC3339Nano)}, p)
}

// ReplayCompleted tells the owner a bulk replay finished (not one
// cancelled, nor one of a subscription deleted meanwhile). The step that
// finished it recorded the event owed; if sending it now fails, the scan
// sends it.
func (l *Lifecycle) ReplayCompleted(ctx context.Context, job core.ReplayJob) {
	sub, ok := l.cfg.Subs.Registry().Get(job.SubscriptionID)
	if !ok {
		return // deleted; or not yet known here, and the scan sends it
	}
	l.send(ctx, store.Notice{SubscriptionID: sub.ID, TenantID: sub.TenantID, Host: sub.Host, URL: sub.URL, Job: job})
}

// send writes the event n owes, then marks it sent. Until then the scan
// sends it again: a failure on either side is retried, and a retry of an
// event already written writes nothing (its idempotency key).
func (l *Lifecycle) send(ctx context.Context, n store.Notice) {
	began := time.Now()
	ev, err := owed(n)
	if err == nil {
		_, err = l.cfg.Ingest.Submit(ctx, ev)
	}
	if err != nil {
		l.logErr("emitting "+ev.Type, n.SubscriptionID, began, err)
		return
	}
	began = time.Now()
	l.logErr("marking "+ev.Type+" sent", n.SubscriptionID, began, l.cfg.Store.NoticeSent(ctx, n))
}

// owed is the event n owes, under an idempotency key of the decision: the
// subscription and when it was disabled, or the job.
func owed(n store.Notice) (core.Event, error) {
	ev := core.Event{TenantID: n.TenantID, Type: TypeDisabled, Payload: n.Disabled, About: n.SubscriptionID}
	if n.Job.ID != "" {
		ev.Type, ev.IdempotencyKey = TypeReplayCompleted, TypeReplayCompleted+":"+n.Job.ID
		var err error
		ev.Payload, err = json.Marshal(replayPayload(n.Job, n.URL))
		return ev, err
	}
	var p struct {
		DisabledAt time.Time `json:"disabled_at"`
	}
	if err := json.Unmarshal(n.Disabled, &p); err != nil {
		return ev, fmt.Errorf("reading the notice: %w", err)
	}
	ev.IdempotencyKey = TypeDisabled + ":" + n.SubscriptionID + ":" + p.DisabledAt.UTC().Format(time.RFC3339Nano)
	return ev, nil
}

// Scan sends the recoveries due and the events decisions still owe
// (store.Notices), and disables what failed for DisableAfter.
func (l *Lifecycle) Scan(ctx context.Context, now time.Time) {
	began := time.Now()
	rec, err := l.cfg.Store.SubscriptionsRecovered(ctx)
	l.logErr("listing recovered subscriptions", "", began, err)
	for _, f := range rec {
		if l.cfg.Shedding != nil && l.cfg.Shedding(f.ID) {
			continue // listed again at each scan until it is told
		}
		l.recovered(ctx, f, now)
	}
	began = time.Now()
	notices, err := l.cfg.Store.Notices(ctx)
	l.logErr("listing the operational events owed", "", began, err)
	for _, n := range notices {
		if l.cfg.Owns(n.Host) {
			l.send(ctx, n)
		}
	}
	if l.cfg.DisableAfter <= 0 {
		return
	}
	began = time.Now()
	failing, err := l.cfg.Store.SubscriptionsFailing(ctx, now.Add(-l.cfg.DisableAfter), now.Add(-dailyAttempt))
	l.logErr("listing failing subscriptions", "", began, err)
	for _, f := range failing {
		if !l.cfg.Owns(f.Host) {
			continue
		}
		reason := fmt.Sprintf("every attempt failed for %s (since %s)", days(l.cfg.DisableAfter), f.FailingSince.UTC().Format(time.RFC3339))
		began := time.Now()
		if err := l.Disable(ctx, f.ID, reason); err != nil {
			l.logErr("disabling a failing subscription", f.ID, began, err)
		} else {
			l.cfg.Log.Warn("subscription disabled", "subscription", f.ID, "reason", reason)
		}
	}
}

// recovered tells the owner f recovered, once (nodes racing send it
// once): how long it failed, and the attempt that succeeded.
func (l *Lifecycle) recovered(ctx context.Context, f store.FailingSubscription, now time.Time) {
	began := time.Now()
	moved, err := l.cfg.Store.SubscriptionAlert(ctx, f.ID, false, now, alertEvery)
	if err != nil || !moved {
		l.logErr("noting a recovery", f.ID, began, err)
		return
	}
	began = time.Now()
	ok, err := l.succeeded(ctx, f)
	l.logErr("reading the attempt that recovered", f.ID, began, err)
	l.emit(ctx, core.Event{TenantID: f.TenantID, Type: TypeRecovered, About: f.ID}, recoveredPayload(f, ok, now))
}

// succeeded finds the first successful attempt after f's last failure:
// among the newest page of them, the earliest. Zero if none is kept.
func (l *Lifecycle) succeeded(ctx context.Context, f store.FailingSubscription) (core.Attempt, error) {
	page, err := l.cfg.Store.AttemptList(ctx, store.AttemptListParams{SubscriptionID: f.ID, Since: f.LastFailureAt, Limit: 100})
	var first core.Attempt
	for _, r := range page.Data {
		if a := r.Attempt; a.StatusCode >= 200 && a.StatusCode < 300 && (first.StartedAt.IsZero() || a.StartedAt.Before(first.StartedAt)) {
			first = a
		}
	}
	return first, err
}

// The payloads, one function each: docs/api.md lists their fields
// (TestPayloadsAreDocumented).

// failingPayload is what a failing alert tells: why, the attempt that
// showed it, and how the subscription's deliveries stand.
func failingPayload(sub *core.Subscription, f Failure, st store.DeliveryStats) map[string]any {
	return map[string]any{"subscription_id": sub.ID, "url": sub.URL, "reason": f.Reason,
		"last_status": f.Status, "last_error": f.Error, "last_attempt_at": f.At.UTC(),
		"failing_since": timeOrNil(st.FailingSince), "pending": st.Pending, "failed": st.Failed}
}

// recoveredPayload is what a recovery tells: since when f failed and
// for how long (up to the attempt that succeeded, or now if none is
// kept), and that attempt.
func recoveredPayload(f store.FailingSubscription, ok core.Attempt, now time.Time) map[string]any {
	p := map[string]any{"subscription_id": f.ID, "url": f.URL, "recovered_at": now.UTC(),
		"failing_since": timeOrNil(f.FailingSince), "last_failure_at": timeOrNil(f.LastFailureAt),
		"failed_for_seconds": nil, "succeeded_at": nil, "status": nil, "duration_ms": nil}
	end := now
	if !ok.StartedAt.IsZero() {
		end = ok.StartedAt
		p["succeeded_at"], p["status"], p["duration_ms"] = ok.StartedAt.UTC(), ok.StatusCode, ok.Duration.Milliseconds()
	}
	if !f.FailingSince.IsZero() {
		p["failed_for_seconds"] = int64(max(0, end.Sub(f.FailingSince)) / time.Second)
	}
	return p
}

// disabledPayload is what a disable tells: sub as written, the failures
// that led to it, and what it leaves unsent: the deliveries pending just
// before it (skipped by it) from the oldest one's creation, which is the
// since a bulk replay takes to send them once the endpoint is fixed.
func disabledPayload(sub core.Subscription, st store.DeliveryStats) map[string]any {
	return map[string]any{"subscription_id": sub.ID, "url": sub.URL, "reason": sub.DisabledReason,
		"disabled_at": sub.UpdatedAt.UTC(), "failing_since": timeOrNil(st.FailingSince), "failed": st.Failed,
		"skipped": st.Pending, "skipped_since": timeOrNil(st.OldestPendingAt)}
}

// sheddingPayload is what a beginning of shedding tells: since when, and
// the backlog over the threshold that decided it.
func sheddingPayload(sub *core.Subscription, c shed.Change, threshold int) map[string]any {
	return map[string]any{"subscription_id": sub.ID, "url": sub.URL, "shedding_since": c.Since.UTC(),
		"pending": c.Pending, "threshold": threshold}
}

// sheddingEndedPayload is what its end tells: the span whose deliveries
// were written skipped, the since and until of a replay that sends them.
func sheddingEndedPayload(sub *core.Subscription, c shed.Change) map[string]any {
	return map[string]any{"subscription_id": sub.ID, "url": sub.URL, "shedding_since": c.Since.UTC(),
		"shedding_ended_at": c.Ended.UTC()}
}

// replayPayload is what a finished job tells.
func replayPayload(job core.ReplayJob, url string) map[string]any {
	return map[string]any{"job_id": job.ID, "subscription_id": job.SubscriptionID, "url": url,
		"since": job.Since, "until": timeOrNil(job.Until), "states": job.States, "rate": job.Rate,
		"replayed": job.Replayed}
}

// emit writes one operational event, ev with payload, into its tenant's
// stream.
func (l *Lifecycle) emit(ctx context.Context, ev core.Event, payload map[string]any) error {
	began := time.Now()
	body, err := json.Marshal(payload)
	if err == nil {
		ev.Payload = body
		_, err = l.cfg.Ingest.Submit(ctx, ev)
	}
	l.logErr("emitting "+ev.Type, ev.About, began, err)
	return err
}

// logErr tells of a store call begun at began that failed (see outage.Report).
func (l *Lifecycle) logErr(what, subID string, began time.Time, err error) {
	if err != nil {
		l.cfg.Outage.Report(l.cfg.Log, what, began, err, "subscription", subID)
	}
}

func timeOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC()
}

// days says a duration in days when it is whole days.
func days(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		if n := d / (24 * time.Hour); n != 1 {
			return fmt.Sprintf("%d days", n)
		}
		return "1 day"
	}
	return d.String()
}
