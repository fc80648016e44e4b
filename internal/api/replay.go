package api

import (
	"net/http"
	"strconv"
	"time"

	"hookd/internal/audit"
	"hookd/internal/core"
)

type replayRequest struct {
	Since      string   `json:"since"`
	Until      string   `json:"until"`
	EventTypes []string `json:"event_types"`
}

type replayJSON struct {
	ID             string     `json:"id"`
	SubscriptionID string     `json:"subscription_id"`
	Since          time.Time  `json:"since"`
	Until          *time.Time `json:"until"`
	EventTypes     []string   `json:"event_types"`
	State          string     `json:"state"`
	Replayed       int        `json:"replayed"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
}

func toReplayJSON(j core.ReplayJob) replayJSON {
	out := replayJSON{ID: j.ID, SubscriptionID: j.SubscriptionID, Since: j.Since, EventTypes: j.EventTypes,
		State: string(j.State), Replayed: j.Replayed, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt}
	if !j.Until.IsZero() {
		u := j.Until
		out.Until = &u
	}
	return out
}

// replaySubscription starts a bulk replay: the subscription's failed and
// skipped deliveries created in [since, until) go back in line as a job,
// a batch a second, then through the queue and admission like any other.
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
	sub, err := s.Store.SubscriptionGet(r.Context(), p.scope(), r.PathValue("id"))
	if err != nil {
		return err
	}
	// One running job per subscription: a second would only double the
	// pace the job exists to bound.
	defer s.replaying.lock(sub.ID)()
	running, err := s.Store.ReplayJobsRunning(r.Context())
	if err != nil {
		return err
	}
	for _, j := range running {
		if j.SubscriptionID == sub.ID {
			return errReplayRunning(j.ID)
		}
	}
	now := time.Now().UTC()
	j := core.ReplayJob{ID: core.NewID("rpl"), TenantID: sub.TenantID, SubscriptionID: sub.ID,
		Since: since.UTC(), Until: until.UTC(), EventTypes: req.EventTypes, States: core.ReplayStatesDefault,
		Rate: core.ReplayRateMax, State: core.ReplayRunning, CreatedAt: now, UpdatedAt: now}
	if j.EventTypes == nil {
		j.EventTypes = []string{}
	}
	detail := map[string]any{"job_id": j.ID, "since": j.Since, "event_types": j.EventTypes}
	if !j.Until.IsZero() {
		detail["until"] = j.Until
	}
	if err := s.Store.ReplayJobCreate(audit.Record(r.Context(), audit.ReplaySubscription, sub.ID, detail), j); err != nil {
		return err
	}
	if s.Replays != nil {
		s.Replays.Kick()
	}
	out := toReplayJSON(j)
	writeJSON(w, http.StatusAccepted, map[string]any{"job_id": j.ID, "job": out})
	return nil
}

func (s *Server) getReplay(w http.ResponseWriter, r *http.Request, p principal) error {
	j, err := s.Store.ReplayJobGet(r.Context(), p.scope(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toReplayJSON(j))
	return nil
}
