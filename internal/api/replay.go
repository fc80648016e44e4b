package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"hookd/internal/audit"
	"hookd/internal/core"
	"hookd/internal/store"
)

type replayRequest struct {
	Since      string   `json:"since"`
	Until      string   `json:"until"`
	EventTypes []string `json:"event_types"`
	States     []string `json:"states"`
	Rate       *float64 `json:"rate"`
}

type replayJSON struct {
	ID             string     `json:"id"`
	SubscriptionID string     `json:"subscription_id"`
	Since          time.Time  `json:"since"`
	Until          *time.Time `json:"until"`
	EventTypes     []string   `json:"event_types"`
	States         []string   `json:"states"`
	Rate           float64    `json:"rate"`
	State          string     `json:"state"`
	Replayed       int        `json:"replayed"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	CancelledAt    *time.Time `json:"cancelled_at"`
}

func toReplayJSON(j core.ReplayJob) replayJSON {
	out := replayJSON{ID: j.ID, SubscriptionID: j.SubscriptionID, Since: j.Since, EventTypes: j.EventTypes,
		States: make([]string, len(j.States)), Rate: j.Rate, State: string(j.State), Replayed: j.Replayed,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt}
	if out.EventTypes == nil {
		out.EventTypes = []string{}
	}
	for i, s := range j.States {
		out.States[i] = string(s)
	}
	if !j.Until.IsZero() {
		u := j.Until
		out.Until = &u
	}
	if !j.CancelledAt.IsZero() {
		c := j.CancelledAt
		out.CancelledAt = &c
	}
	return out
}

// replayStates reads the states a replay puts back: failed and skipped
// unless named; delivered to resend what arrived; never pending, which is
// in line already. Sorted, each once.
func replayStates(in []string) ([]core.DeliveryState, error) {
	if in == nil {
		return slices.Clone(core.ReplayStatesDefault), nil
	}
	if len(in) == 0 {
		return nil, errInvalid("states", "must name at least one of delivered, failed and skipped (default failed and skipped)")
	}
	var out []core.DeliveryState
	for i, s := range in {
		field := "states[" + strconv.Itoa(i) + "]"
		switch st := core.DeliveryState(s); st {
		case core.DeliveryDelivered, core.DeliveryFailed, core.DeliverySkipped:
			if !slices.Contains(out, st) {
				out = append(out, st)
			}
		case core.DeliveryPending:
			return nil, errInvalid(field, "pending deliveries are in line already; replay delivered, failed or skipped ones")
		default:
			return nil, errInvalid(field, "must be delivered, failed or skipped")
		}
	}
	slices.Sort(out)
	return out, nil
}

// replayRate is the pace asked for, within the bounds that need no
// subscription: core.RateMin to core.ReplayRateMax. 0: not given.
func replayRate(rate *float64) (float64, error) {
	if rate == nil {
		return 0, nil
	}
	if !(*rate >= core.RateMin) || *rate > core.ReplayRateMax {
		return 0, errInvalid("rate", "must be from "+strconv.FormatFloat(core.RateMin, 'f', -1, 64)+" to "+
			strconv.Itoa(core.ReplayRateMax)+" deliveries per second")
	}
	return *rate, nil
}

// errReplayDisabled refuses a replay into a disabled subscription: what it
// put back would wait there unsent, and a job would report done.
var errReplayDisabled = &apiError{Status: http.StatusConflict, Code: "conflict", Field: "state",
	Message: "state: the subscription is disabled; make it active (PATCH {\"state\": \"active\"}), then replay"}

// replaySubscription starts a bulk replay: the subscription's deliveries
// in the states asked (failed and skipped by default) created in
// [since, until) go back in line as a job, at the job's rate, then through
// the queue and admission like any other.
func (s *Server) replaySubscription(w http.ResponseWriter, r *http.Request, p principal) error {
	var req replayRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.Since == "" {
		return errInvalid("since", "is required")
	}
	since, err := parseTime("since", req.Since, errInvalid)
	if err != nil {
		return err
	}
	if since.After(time.Now()) {
		// A job from the future would find nothing and say "done, 0".
		return errInvalid("since", "is in the future: no delivery was created after it yet")
	}
	var until time.Time
	if req.Until != "" {
		if until, err = parseTime("until", req.Until, errInvalid); err != nil {
			return err
		}
		if !until.After(since) {
			return errInvalid("until", "must be after since")
		}
	}
	for i, t := range req.EventTypes {
		if err := core.ValidateEventType("event_types", t); err != nil {
			return errInvalid("event_types["+strconv.Itoa(i)+"]", "must be an event type like payment.succeeded")
		}
	}
	states, err := replayStates(req.States)
	if err != nil {
		return err
	}
	rate, err := replayRate(req.Rate)
	if err != nil {
		return err
	}
	sub, err := s.Store.SubscriptionGet(r.Context(), p.scope(), r.PathValue("id"))
	if err != nil {
		return err
	}
	j, err := s.startReplay(r.Context(), sub, since, until, req.EventTypes, states, rate)
	if err != nil {
		return err
	}
	out := toReplayJSON(j)
	writeJSON(w, http.StatusAccepted, map[string]any{"job_id": j.ID, "job": out})
	return nil
}

// startReplay starts a bulk replay job of sub's deliveries in states
// created in [since, until) (until zero: no bound) of eventTypes (none:
// all), at rate (0: as fast as allowed), unless one is running: the one
// way both APIs start one.
func (s *Server) startReplay(ctx context.Context, sub core.Subscription, since, until time.Time, eventTypes []string,
	states []core.DeliveryState, rate float64) (core.ReplayJob, error) {
	if sub.State == core.SubDisabled {
		return core.ReplayJob{}, errReplayDisabled
	}
	if states == nil {
		states = slices.Clone(core.ReplayStatesDefault)
	}
	// Never faster than the subscription is sent to: admission would hold
	// the rest back anyway, and the job's rate would be a false promise.
	limit := float64(core.ReplayRateMax)
	if sub.RateLimit > 0 {
		limit = min(limit, sub.RateLimit)
	}
	switch {
	case rate == 0:
		rate = limit
	case rate > limit:
		return core.ReplayJob{}, errInvalid("rate", "must be at most the subscription's rate_limit, "+
			strconv.FormatFloat(limit, 'f', -1, 64)+" deliveries per second")
	}
	now := time.Now().UTC()
	j := core.ReplayJob{ID: core.NewID("rpl"), TenantID: sub.TenantID, SubscriptionID: sub.ID,
		Since: since.UTC(), Until: until.UTC(), EventTypes: eventTypes, States: states, Rate: rate,
		State: core.ReplayRunning, CreatedAt: now, UpdatedAt: now}
	if j.EventTypes == nil {
		j.EventTypes = []string{}
	}
	detail := map[string]any{"job_id": j.ID, "since": j.Since, "event_types": j.EventTypes, "states": j.States, "rate": j.Rate}
	if !j.Until.IsZero() {
		detail["until"] = j.Until
	}
	// One running job per subscription, which the store checks in the
	// insert's own transaction, on every node: a second would only double
	// the pace the job exists to bound.
	err := s.Store.ReplayJobCreate(audit.Record(ctx, audit.ReplaySubscription, sub.ID, detail), j)
	if errors.Is(err, store.ErrConflict) {
		return core.ReplayJob{}, errReplayRunning(s.runningReplay(ctx, sub.ID))
	}
	if err != nil {
		return core.ReplayJob{}, err
	}
	if s.Replays != nil {
		s.Replays.Kick()
	}
	return j, nil
}

// runningReplay names the subscription's running job, for the refusal's
// message: "" if none runs now (it finished since) or the list failed.
func (s *Server) runningReplay(ctx context.Context, subID string) string {
	running, err := s.Store.ReplayJobsRunning(ctx)
	if err != nil {
		return ""
	}
	for _, j := range running {
		if j.SubscriptionID == subID {
			return j.ID
		}
	}
	return ""
}

func (s *Server) getReplay(w http.ResponseWriter, r *http.Request, p principal) error {
	j, err := s.Store.ReplayJobGet(r.Context(), p.scope(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toReplayJSON(j))
	return nil
}

// cancelReplay stops a running job on every node: each step reads the
// job's state in its own transaction. What it put back stays in line.
func (s *Server) cancelReplay(w http.ResponseWriter, r *http.Request, p principal) error {
	if err := noBody(w, r); err != nil {
		return err
	}
	// Read first for the audit entry's target, the subscription, as for
	// replay.subscription; the cancel itself checks the state again.
	j, err := s.Store.ReplayJobGet(r.Context(), p.scope(), r.PathValue("id"))
	if err != nil {
		return err
	}
	ctx := audit.Record(r.Context(), audit.ReplayCancel, j.SubscriptionID, map[string]any{"job_id": j.ID})
	j, err = s.Store.ReplayJobCancel(ctx, p.scope(), j.ID, time.Now().UTC())
	if errors.Is(err, store.ErrConflict) {
		return errReplayNotRunning(j.State)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toReplayJSON(j))
	return nil
}

// listReplays pages a subscription's jobs, newest first.
func (s *Server) listReplays(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	cursor, err := idCursor(q, "rpl")
	if err != nil {
		return err
	}
	params := store.ReplayJobListParams{TenantID: p.scope(), SubscriptionID: r.PathValue("id"), Cursor: cursor}
	if params.Limit, err = parseLimit(q.Get("limit")); err != nil {
		return err
	}
	// A subscription of another tenant must look absent, even with no jobs.
	if _, err := s.Store.SubscriptionGet(r.Context(), p.scope(), params.SubscriptionID); err != nil {
		return err
	}
	page, err := s.Store.ReplayJobList(r.Context(), params)
	if err != nil {
		return err
	}
	writePage(w, page, toReplayJSON)
	return nil
}
