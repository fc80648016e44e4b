package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/webhook"
)

// An endpoint is a subscription. filterTypes are its event_types (absent:
// "*", every type but hookd's own); disabled is any state but active.

type svixEndpointJSON struct {
	ID          string   `json:"id"`
	UID         *string  `json:"uid"`
	URL         string   `json:"url"`
	Description string   `json:"description"`
	Version     int      `json:"version"`
	RateLimit   *int     `json:"rateLimit"`
	Disabled    bool     `json:"disabled"`
	FilterTypes []string `json:"filterTypes"`
	// The same under the names Svix's newer clients read (npm svix 2.x).
	ThrottleRate *int              `json:"throttleRate"`
	EventTypes   []string          `json:"eventTypes"`
	Channels     []string          `json:"channels"`
	Metadata     map[string]string `json:"metadata"`
	CreatedAt    time.Time         `json:"createdAt"`
	UpdatedAt    time.Time         `json:"updatedAt"`
}

func toSvixEndpoint(s core.Subscription) svixEndpointJSON {
	var types []string
	if !slices.Equal(s.EventTypes, []string{"*"}) {
		types = s.EventTypes
	}
	return svixEndpointJSON{ID: epID(s.ID), UID: nullIfEmpty(s.UID), URL: redactURL(s.URL), Description: s.Description,
		Version: 1, RateLimit: svixRate(s.RateLimit), Disabled: s.State != core.SubActive, FilterTypes: types,
		ThrottleRate: svixRate(s.RateLimit), EventTypes: types,
		Metadata: orEmptyMap(s.Metadata), CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// svixEndpointIn is EndpointIn, EndpointUpdate and EndpointPatch.
type svixEndpointIn struct {
	URL         *string            `json:"url"`
	Description *string            `json:"description"`
	Disabled    *bool              `json:"disabled"`
	FilterTypes jsontext.Value     `json:"filterTypes"`
	Channels    jsontext.Value     `json:"channels"`
	Headers     *headerValues      `json:"headers"`
	Metadata    *map[string]string `json:"metadata"`
	RateLimit   jsontext.Value     `json:"rateLimit"`
	Secret      jsontext.Value     `json:"secret"`
	UID         jsontext.Value     `json:"uid"`
	Version     *int               `json:"version"` // taken, not kept: hookd has one version
	// Svix's newer names for filterTypes and rateLimit (npm svix 2.x
	// sends only these); either name is taken, see aliases.
	EventTypes   jsontext.Value `json:"eventTypes"`
	ThrottleRate jsontext.Value `json:"throttleRate"`

	typesName, rateName string // the names the caller used, for errors
}

// aliases takes eventTypes and throttleRate as filterTypes and rateLimit.
// Given both ways, the two must agree.
func (in *svixEndpointIn) aliases() error {
	var err error
	if in.FilterTypes, in.typesName, err = alias("filterTypes", in.FilterTypes, "eventTypes", in.EventTypes); err != nil {
		return err
	}
	in.RateLimit, in.rateName, err = alias("rateLimit", in.RateLimit, "throttleRate", in.ThrottleRate)
	return err
}

// alias is the value given under either of a field's two names, and the
// name it came under.
func alias(name string, v jsontext.Value, newer string, nv jsontext.Value) (jsontext.Value, string, error) {
	switch {
	case len(nv) == 0:
		return v, name, nil
	case len(v) == 0:
		return nv, newer, nil
	}
	a, b := v.Clone(), nv.Clone()
	if a.Compact() != nil || b.Compact() != nil || !bytes.Equal(a, b) {
		return nil, "", errInvalid(newer, "differs from "+name+", given as well")
	}
	return nv, newer, nil
}

// apply validates in and sets it on sub: the fields it shares with /v1
// through the same validation (s.apply), the rest here. Without patch,
// absent fields take their defaults (create and PUT).
func (s *Server) svixApplyEndpoint(in svixEndpointIn, sub *core.Subscription, patch bool) error {
	if err := in.aliases(); err != nil {
		return err
	}
	var f subscriptionFields
	if in.URL != nil {
		f.URL = in.URL
	} else if !patch {
		return errInvalid("url", "is required")
	}
	var types []string
	set, null, err := optional(in.typesName, in.FilterTypes, &types)
	if err != nil {
		return err
	}
	// [] is left to the event_types validation, which refuses it: it
	// reads as "none" to a client, not as absent's "all".
	if set && null || !set && !patch {
		types = []string{"*"}
	}
	if types != nil {
		f.EventTypes = &types
	}
	var channels []string
	if _, _, err := optional("channels", in.Channels, &channels); err != nil {
		return err
	} else if len(channels) > 0 {
		return errNotImplemented("channels")
	}
	var rate int
	if set, _, err := optional(in.rateName, in.RateLimit, &rate); err != nil {
		return err
	} else if set || !patch {
		if err := svixRateLimit(in.rateName, rate); err != nil {
			return err
		}
		r := float64(rate)
		if svixRateKept(sub.RateLimit, rate) {
			r = sub.RateLimit
		}
		f.RateLimit = &r
	}
	if in.Headers != nil {
		if _, err := in.Headers.plain(errInvalid); err != nil {
			return err // Svix's 422, before the shared check's 400
		}
		f.Headers = in.Headers
	}
	next := *sub
	if err := s.apply(f, &next); err != nil {
		// Shared validation names event_types, shown as filterTypes unless
		// the caller said eventTypes.
		var fe *core.FieldError
		if in.typesName != "filterTypes" && errors.As(err, &fe) && strings.HasPrefix(fe.Field, "event_types") {
			return errInvalid(in.typesName+strings.TrimPrefix(fe.Field, "event_types"), fe.Message)
		}
		return err
	}
	if in.Description != nil || !patch {
		d := ""
		if in.Description != nil {
			d = *in.Description
		}
		if len(d) > 1024 {
			return errInvalid("description", "must be at most 1024 characters")
		}
		next.Description = d
	}
	if in.Metadata != nil || !patch {
		var m map[string]string
		if in.Metadata != nil {
			m = *in.Metadata
		}
		if err := svixMetadata(m); err != nil {
			return err
		}
		next.Metadata = m
	}
	var uid string
	if set, _, err := optional("uid", in.UID, &uid); err != nil {
		return err
	} else if set || !patch {
		if uid != "" {
			if err := svixUID("uid", uid); err != nil {
				return err
			}
		}
		next.UID = uid
	}
	if in.Disabled != nil || !patch {
		disabled := in.Disabled != nil && *in.Disabled
		// A paused subscription shows as disabled: written back, it stays
		// paused (disabling it would skip what the pause holds).
		switch {
		case disabled && next.State == core.SubActive:
			next.State, next.DisabledReason = core.SubDisabled, "disabled by request"
		case !disabled:
			next.State, next.DisabledReason = core.SubActive, ""
		}
	}
	*sub = next
	return nil
}

// svixSecret checks a secret the caller chose: base64 of 24 to 64 bytes,
// with or without whsec_; it is stored as whsec_<base64>.
func svixSecret(field string, raw jsontext.Value) (string, error) {
	var v string
	if _, null, err := optional(field, raw, &v); err != nil || null || v == "" {
		return "", err
	}
	enc := strings.TrimPrefix(v, webhook.SecretPrefix)
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(key) < 24 || len(key) > 64 {
		return "", errInvalid(field, "must be the base64 of 24 to 64 bytes, with or without whsec_")
	}
	return webhook.SecretPrefix + enc, nil
}

func (s *Server) svixListEndpoints(w http.ResponseWriter, r *http.Request, p principal) error {
	limit, iter, err := svixList(r)
	if err != nil {
		return err
	}
	app, err := s.svixApp(r.Context(), p, r.PathValue("app_id"))
	if err != nil {
		return err
	}
	cursor := subIDOf(iter)
	if iter != "" && !isIDOf(cursor, "sub") {
		return errQuery("iterator", "is not an iterator this list gave")
	}
	page, err := s.Store.SubscriptionList(r.Context(), store.SubscriptionListParams{TenantID: app.ID, Cursor: cursor, Limit: limit})
	if err != nil {
		return err
	}
	svixPage(w, page, limit, toSvixEndpoint)
	return nil
}

func (s *Server) svixCreateEndpoint(w http.ResponseWriter, r *http.Request, p principal) error {
	var in svixEndpointIn
	if err := svixDecode(w, r, &in); err != nil {
		return err
	}
	app, err := s.svixApp(r.Context(), p, r.PathValue("app_id"))
	if err != nil {
		return err
	}
	// New endpoints send svix-* headers, and start at the application's rate.
	sub := core.Subscription{TenantID: app.ID, State: core.SubActive, SvixHeaders: true}
	if len(in.RateLimit) == 0 && len(in.ThrottleRate) == 0 {
		in.RateLimit = jsontext.Value(strconv.Itoa(app.RateLimit))
	}
	if err := s.svixApplyEndpoint(in, &sub, false); err != nil {
		return err
	}
	if sub.Secret, err = svixSecret("secret", in.Secret); err != nil {
		return err
	}
	if err := s.addSubscription(r.Context(), &sub); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, toSvixEndpoint(sub))
	return nil
}

func (s *Server) svixGetEndpoint(w http.ResponseWriter, r *http.Request, p principal) error {
	sub, err := s.svixAppEndpoint(r, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSvixEndpoint(sub))
	return nil
}

func (s *Server) svixUpdateEndpoint(w http.ResponseWriter, r *http.Request, p principal) error {
	return s.svixChangeEndpoint(w, r, p, false)
}

func (s *Server) svixPatchEndpoint(w http.ResponseWriter, r *http.Request, p principal) error {
	return s.svixChangeEndpoint(w, r, p, true)
}

// svixChangeEndpoint is PUT (every field, absent ones to their defaults)
// and PATCH (the fields given), through the subscription service. A
// secret in a PATCH rotates to it (the old one signs for 24 h more).
func (s *Server) svixChangeEndpoint(w http.ResponseWriter, r *http.Request, p principal, patch bool) error {
	var in svixEndpointIn
	if err := svixDecode(w, r, &in); err != nil {
		return err
	}
	if in.Headers != nil {
		return errInvalid("headers", "are set with PUT or PATCH …/headers")
	}
	secret := ""
	if patch {
		var err error
		if secret, err = svixSecret("secret", in.Secret); err != nil {
			return err
		}
	} else if len(in.Secret) > 0 {
		return errInvalid("secret", "is set on create, or with POST …/secret/rotate")
	}
	cur, err := s.svixAppEndpoint(r, p)
	if err != nil {
		return err
	}
	sub, err := s.Subs.Update(r.Context(), cur.TenantID, cur.ID, func(sub *core.Subscription) error {
		return s.svixApplyEndpoint(in, sub, patch)
	})
	if err != nil {
		return err
	}
	if secret != "" {
		if sub, err = s.Subs.RotateTo(r.Context(), sub.TenantID, sub.ID, secret); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, toSvixEndpoint(sub))
	return nil
}

func (s *Server) svixDeleteEndpoint(w http.ResponseWriter, r *http.Request, p principal) error {
	sub, err := s.svixAppEndpoint(r, p)
	if err != nil {
		return err
	}
	if err := s.Subs.Delete(r.Context(), sub.TenantID, sub.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// svixGetSecret shows the endpoint's signing secret, as Svix does: to the
// admin token and the application's own key, never another tenant.
func (s *Server) svixGetSecret(w http.ResponseWriter, r *http.Request, p principal) error {
	sub, err := s.svixAppEndpoint(r, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"key": sub.Secret})
	return nil
}

func (s *Server) svixRotateSecret(w http.ResponseWriter, r *http.Request, p principal) error {
	var in struct {
		Key jsontext.Value `json:"key"`
	}
	if r.ContentLength != 0 {
		if err := svixDecode(w, r, &in); err != nil {
			return err
		}
	}
	secret, err := svixSecret("key", in.Key)
	if err != nil {
		return err
	}
	sub, err := s.svixAppEndpoint(r, p)
	if err != nil {
		return err
	}
	if _, err := s.Subs.RotateTo(r.Context(), sub.TenantID, sub.ID, secret); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// svixGetHeaders names the endpoint's headers; values are never shown
// again (as on /v1), so every one is listed as sensitive.
func (s *Server) svixGetHeaders(w http.ResponseWriter, r *http.Request, p principal) error {
	sub, err := s.svixAppEndpoint(r, p)
	if err != nil {
		return err
	}
	h := map[string]string{}
	names := []string{}
	for _, name := range slices.Sorted(maps.Keys(sub.Headers)) {
		h[name], names = Redacted, append(names, name)
	}
	writeJSON(w, http.StatusOK, map[string]any{"headers": h, "sensitive": names})
	return nil
}

func (s *Server) svixUpdateHeaders(w http.ResponseWriter, r *http.Request, p principal) error {
	return s.svixSetHeaders(w, r, p, false)
}

func (s *Server) svixPatchHeaders(w http.ResponseWriter, r *http.Request, p principal) error {
	return s.svixSetHeaders(w, r, p, true)
}

// svixSetHeaders replaces (PUT) or adds to (PATCH) the endpoint's
// headers, validated as /v1's headers are. headers is required, as on
// Svix's server (a PUT without it would clear every header); a PATCH's
// null value removes that header, a PUT's is refused.
func (s *Server) svixSetHeaders(w http.ResponseWriter, r *http.Request, p principal, merge bool) error {
	var in struct {
		Headers *headerValues `json:"headers"`
	}
	if err := svixDecode(w, r, &in); err != nil {
		return err
	}
	if in.Headers == nil {
		return errInvalid("headers", "is required")
	}
	if !merge {
		if _, err := in.Headers.plain(errInvalid); err != nil {
			return err
		}
	}
	cur, err := s.svixAppEndpoint(r, p)
	if err != nil {
		return err
	}
	_, err = s.Subs.Update(r.Context(), cur.TenantID, cur.ID, func(sub *core.Subscription) error {
		h := headerValues{}
		if merge {
			for name, v := range sub.Headers {
				h[name] = &v
			}
		}
		for name, v := range *in.Headers {
			for old := range h { // the same name in another case replaces it
				if strings.EqualFold(old, name) {
					delete(h, old)
				}
			}
			if v != nil {
				h[name] = v
			}
		}
		return s.apply(subscriptionFields{Headers: &h}, sub)
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// svixRecover resends the endpoint's failed messages created in [since,
// until): a bulk replay job (failed and skipped deliveries), watched as a
// background task.
func (s *Server) svixRecover(w http.ResponseWriter, r *http.Request, p principal) error {
	var in struct {
		Since string `json:"since"`
		Until string `json:"until"`
	}
	if err := svixDecode(w, r, &in); err != nil {
		return err
	}
	if in.Since == "" {
		return errInvalid("since", "is required")
	}
	since, err := parseTime("since", in.Since, errInvalid)
	if err != nil {
		return err
	}
	var until time.Time
	if in.Until != "" {
		if until, err = parseTime("until", in.Until, errInvalid); err != nil {
			return err
		}
		if !until.After(since) {
			return errInvalid("until", "must be after since")
		}
	}
	sub, err := s.svixAppEndpoint(r, p)
	if err != nil {
		return err
	}
	j, err := s.startReplay(r.Context(), sub, since, until, nil, nil, 0)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, toSvixTask(j))
	return nil
}

func toSvixTask(j core.ReplayJob) map[string]any {
	status := "running"
	if j.State != core.ReplayRunning {
		status = "finished"
	}
	updated := j.UpdatedAt
	if updated.IsZero() {
		updated = j.CreatedAt
	}
	return map[string]any{"id": taskID(j.ID), "status": status, "task": "endpoint.recover",
		"data": map[string]any{"replayed": j.Replayed}, "updatedAt": updated}
}

// svixGetTask is a recover's progress: its replay job.
func (s *Server) svixGetTask(w http.ResponseWriter, r *http.Request, p principal) error {
	j, err := s.Store.ReplayJobGet(r.Context(), p.scope(), jobIDOf(r.PathValue("task_id")))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSvixTask(j))
	return nil
}

// svixEndpointStats answers Svix's endpoint stats from endpointStats.
func (s *Server) svixEndpointStats(w http.ResponseWriter, r *http.Request, p principal) error {
	sub, err := s.svixAppEndpoint(r, p)
	if err != nil {
		return err
	}
	since, err := svixQueryTime(r, "since")
	if err != nil {
		return err
	}
	until, err := svixQueryTime(r, "until")
	if err != nil {
		return err
	}
	st, err := s.endpointStats(r.Context(), sub, since, until)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

type svixStatsJSON struct {
	Success  int64 `json:"success"`
	Pending  int64 `json:"pending"`
	Sending  int64 `json:"sending"`
	Fail     int64 `json:"fail"`
	Canceled int64 `json:"canceled"`
}

// endpointStats is the one place the Svix API reads an endpoint's
// counts: the stats API's day buckets covering [since, until) (default
// the last 28 days; both ends widened to whole UTC days, the counts'
// grain), summed. sending stays 0: what is in flight is the dispatcher's,
// on the node that sends to the endpoint. canceled counts the skipped
// (never sent: the endpoint was disabled or shed).
func (s *Server) endpointStats(ctx context.Context, sub core.Subscription, since, until time.Time) (svixStatsJSON, error) {
	const day = 24 * time.Hour
	if until.IsZero() {
		until = time.Now().UTC().Truncate(day).Add(day)
	}
	if since.IsZero() {
		since = until.Add(-28 * day)
	}
	if !until.After(since) || until.Sub(since) > 400*day {
		return svixStatsJSON{}, errQuery("until", "must be after since, by at most 400 days")
	}
	if u := until.Truncate(day); !u.Equal(until) {
		until = u.Add(day)
	}
	bs, err := s.Store.DeliveryBuckets(ctx, store.DeliveryBucketsParams{SubscriptionID: sub.ID, TenantID: sub.TenantID,
		Since: since.Truncate(day), Until: until, Width: day})
	if err != nil {
		return svixStatsJSON{}, err
	}
	var out svixStatsJSON
	for _, b := range bs {
		out.Success, out.Fail, out.Pending, out.Canceled = out.Success+b.Delivered, out.Fail+b.Failed, out.Pending+b.Pending, out.Canceled+b.Skipped
	}
	return out, nil
}
