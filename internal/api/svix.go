package api

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"hookd/internal/audit"
	"hookd/internal/core"
	"hookd/internal/store"
)

// The Svix-compatible API (docs/svix.md): Svix's REST API under /api/v1,
// so Svix's SDKs work against hookd. An application is a tenant, an
// endpoint a subscription, a message an event. Its handlers call what the
// /v1 handlers call (the subscription service, ingest, the store, the same
// validation); they translate names, shapes and errors, nothing more.

const svixPrefix = "/api/v1/"

// svixRoutes registers the Svix API: every call docs/svix.md marks
// supported or partial. Any other path under /api/v1 answers Svix's 501
// not_implemented if it is one of Svix's (svixUnsupported), else 404.
func (s *Server) svixRoutes() {
	s.mux.HandleFunc("GET /api/v1/health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })

	s.svixRoute("GET /api/v1/app", s.svixListApps)
	s.svixRoute("POST /api/v1/app", s.svixCreateApp)
	s.svixRoute("GET /api/v1/app/{app_id}", s.svixGetApp)
	s.svixRoute("PUT /api/v1/app/{app_id}", s.svixUpdateApp)
	s.svixRoute("PATCH /api/v1/app/{app_id}", s.svixPatchApp)
	s.svixRoute("DELETE /api/v1/app/{app_id}", s.svixDeleteApp)

	s.svixRoute("GET /api/v1/app/{app_id}/endpoint", s.svixListEndpoints)
	s.svixRoute("POST /api/v1/app/{app_id}/endpoint", s.svixCreateEndpoint)
	s.svixRoute("GET /api/v1/app/{app_id}/endpoint/{endpoint_id}", s.svixGetEndpoint)
	s.svixRoute("PUT /api/v1/app/{app_id}/endpoint/{endpoint_id}", s.svixUpdateEndpoint)
	s.svixRoute("PATCH /api/v1/app/{app_id}/endpoint/{endpoint_id}", s.svixPatchEndpoint)
	s.svixRoute("DELETE /api/v1/app/{app_id}/endpoint/{endpoint_id}", s.svixDeleteEndpoint)
	s.svixRoute("GET /api/v1/app/{app_id}/endpoint/{endpoint_id}/secret", s.svixGetSecret)
	s.svixRoute("POST /api/v1/app/{app_id}/endpoint/{endpoint_id}/secret/rotate", s.svixRotateSecret)
	s.svixRoute("GET /api/v1/app/{app_id}/endpoint/{endpoint_id}/headers", s.svixGetHeaders)
	s.svixRoute("PUT /api/v1/app/{app_id}/endpoint/{endpoint_id}/headers", s.svixUpdateHeaders)
	s.svixRoute("PATCH /api/v1/app/{app_id}/endpoint/{endpoint_id}/headers", s.svixPatchHeaders)
	s.svixRoute("POST /api/v1/app/{app_id}/endpoint/{endpoint_id}/recover", s.svixRecover)
	s.svixRoute("GET /api/v1/app/{app_id}/endpoint/{endpoint_id}/stats", s.svixEndpointStats)
	s.svixRoute("GET /api/v1/app/{app_id}/endpoint/{endpoint_id}/msg", s.svixListAttemptedMessages)

	s.svixRouteCounted("POST /api/v1/app/{app_id}/msg", s.svixCreateMessage, s.Metrics.EventRejected)
	s.svixRoute("GET /api/v1/app/{app_id}/msg", s.svixListMessages)
	s.svixRoute("GET /api/v1/app/{app_id}/msg/{msg_id}", s.svixGetMessage)
	s.svixRoute("GET /api/v1/app/{app_id}/msg/{msg_id}/endpoint", s.svixListAttemptedDestinations)
	s.svixRoute("POST /api/v1/app/{app_id}/msg/{msg_id}/endpoint/{endpoint_id}/resend", s.svixResend)
	s.svixRoute("GET /api/v1/app/{app_id}/msg/{msg_id}/attempt/{attempt_id}", s.svixGetAttempt)
	s.svixRoute("GET /api/v1/app/{app_id}/attempt/endpoint/{endpoint_id}", s.svixAttemptsByEndpoint)
	s.svixRoute("GET /api/v1/app/{app_id}/attempt/msg/{msg_id}", s.svixAttemptsByMessage)

	s.svixRoute("GET /api/v1/event-type", s.svixListEventTypes)
	s.svixRoute("POST /api/v1/event-type", s.svixCreateEventType)
	s.svixRoute("GET /api/v1/event-type/{event_type_name}", s.svixGetEventType)
	s.svixRoute("PUT /api/v1/event-type/{event_type_name}", s.svixUpdateEventType)
	s.svixRoute("PATCH /api/v1/event-type/{event_type_name}", s.svixPatchEventType)
	s.svixRoute("DELETE /api/v1/event-type/{event_type_name}", s.svixDeleteEventType)

	s.svixRoute("GET /api/v1/background-task/{task_id}", s.svixGetTask)
	s.svixRoute("POST /api/v1/auth/logout", s.endPortalSession)
	s.svixRoute("POST /api/v1/auth/app-portal-access/{app_id}", s.svixPortalAccess)

	s.mux.HandleFunc(svixPrefix, svixOther)
	s.mux.HandleFunc("/ingest/api/v1/", svixOther) // Svix's Ingest: none of it is served
}

// svixOther answers a path under Svix's API that hookd has no route for.
func svixOther(w http.ResponseWriter, r *http.Request) {
	if route := svixUnsupported(r); route != "" {
		writeJSON(w, http.StatusNotImplemented, svixBody(errNotImplemented(route)))
		return
	}
	writeJSON(w, http.StatusNotFound, svixBody(&apiError{Status: http.StatusNotFound, Code: "not_found",
		Message: "no such route: " + r.Method + " " + r.URL.Path}))
}

// SvixUnsupported are Svix's routes hookd does not serve (docs/svix.md
// says why): each answers 501 not_implemented, never 404, so a client can
// tell "not here" from "no such object".
var SvixUnsupported = []string{
	"GET /api/v1/app/stats/usage",
	"GET /api/v1/app/{app_id}/stats",
	"GET /api/v1/app/{app_id}/attempt/endpoint/{endpoint_id}/count",
	"POST /api/v1/app/{app_id}/endpoint/{endpoint_id}/msg/test-attempt",
	"GET /api/v1/app/{app_id}/endpoint/{endpoint_id}/mtls",
	"PUT /api/v1/app/{app_id}/endpoint/{endpoint_id}/mtls",
	"DELETE /api/v1/app/{app_id}/endpoint/{endpoint_id}/mtls",
	"GET /api/v1/app/{app_id}/endpoint/{endpoint_id}/oauth",
	"PUT /api/v1/app/{app_id}/endpoint/{endpoint_id}/oauth",
	"DELETE /api/v1/app/{app_id}/endpoint/{endpoint_id}/oauth",
	"GET /api/v1/app/{app_id}/endpoint/{endpoint_id}/rate-limit-status",
	"POST /api/v1/app/{app_id}/endpoint/{endpoint_id}/replay-missing",
	"POST /api/v1/app/{app_id}/endpoint/{endpoint_id}/send-example",
	"GET /api/v1/app/{app_id}/endpoint/{endpoint_id}/transformation",
	"PATCH /api/v1/app/{app_id}/endpoint/{endpoint_id}/transformation",
	"POST /api/v1/app/{app_id}/endpoint/{endpoint_id}/transformation/simulate",
	"PUT /api/v1/app/{app_id}/endpoint/{endpoint_id}/transformation-template/oauth/hubspot",
	"GET /api/v1/app/{app_id}/events",
	"POST /api/v1/app/{app_id}/inbound/msg/{inbound_token}",
	"POST /api/v1/app/{app_id}/inbound/rotate-url",
	"GET /api/v1/app/{app_id}/integration",
	"POST /api/v1/app/{app_id}/integration",
	"GET /api/v1/app/{app_id}/integration/{integ_id}",
	"PUT /api/v1/app/{app_id}/integration/{integ_id}",
	"DELETE /api/v1/app/{app_id}/integration/{integ_id}",
	"GET /api/v1/app/{app_id}/integration/{integ_id}/key",
	"POST /api/v1/app/{app_id}/integration/{integ_id}/key/rotate",
	"POST /api/v1/app/{app_id}/msg/expunge-all-contents",
	"POST /api/v1/app/{app_id}/msg/precheck/active",
	"DELETE /api/v1/app/{app_id}/msg/{msg_id}/content",
	"GET /api/v1/app/{app_id}/msg/{msg_id}/raw",
	"DELETE /api/v1/app/{app_id}/msg/{msg_id}/attempt/{attempt_id}/content",
	"GET /api/v1/app/{app_id}/msg/{msg_id}/attempt/{attempt_id}/headers",
	"GET /api/v1/app/{app_id}/poller/{sink_id}",
	"GET /api/v1/app/{app_id}/poller/{sink_id}/consumer/{consumer_id}",
	"POST /api/v1/app/{app_id}/poller/{sink_id}/consumer/{consumer_id}/seek",
	"GET /api/v1/app/{app_id}/sink",
	"POST /api/v1/app/{app_id}/sink",
	"GET /api/v1/app/{app_id}/sink/{sink_id}",
	"POST /api/v1/auth/dashboard-access/{app_id}",
	"POST /api/v1/auth/app/{app_id}/create-message-token",
	"POST /api/v1/auth/app/{app_id}/expire-all",
	"GET /api/v1/auth/app/{app_id}/poller/{endpoint_id}/token",
	"POST /api/v1/auth/app/{app_id}/poller/{endpoint_id}/token/rotate",
	"POST /api/v1/auth/one-time-token",
	"GET /api/v1/background-task",
	"POST /api/v1/environment/export",
	"POST /api/v1/environment/import",
	"POST /api/v1/event-type/export/openapi",
	"POST /api/v1/event-type/import/openapi",
	"POST /api/v1/event-type/schema/generate-example",
	"GET /api/v1/event-type/{event_type_name}/retry-schedule",
	"PUT /api/v1/event-type/{event_type_name}/retry-schedule",
	"GET /api/v1/events",
	"POST /api/v1/msg/broadcast",
	"GET /api/v1/operational-webhook/endpoint",
	"POST /api/v1/operational-webhook/endpoint",
	"GET /api/v1/operational-webhook/endpoint/{endpoint_id}",
	"PUT /api/v1/operational-webhook/endpoint/{endpoint_id}",
	"DELETE /api/v1/operational-webhook/endpoint/{endpoint_id}",
	"GET /api/v1/operational-webhook/endpoint/{endpoint_id}/headers",
	"PUT /api/v1/operational-webhook/endpoint/{endpoint_id}/headers",
	"GET /api/v1/operational-webhook/endpoint/{endpoint_id}/secret",
	"POST /api/v1/operational-webhook/endpoint/{endpoint_id}/secret/rotate",
	"GET /api/v1/stats/app/{app_id}/attempt",
	"GET /api/v1/stats/app/{app_id}/ep/{endpoint_id}/attempt",
	"POST /api/v1/stats/usage/app",
	"PUT /api/v1/stats/usage/event-types",
	"GET /api/v1/transformation-template",
	"POST /api/v1/transformation-template",
	"GET /api/v1/transformation-template/{transformation_template_id}",
	"PATCH /api/v1/transformation-template/{transformation_template_id}",
	"PUT /api/v1/transformation-template/{transformation_template_id}",
	"DELETE /api/v1/transformation-template/{transformation_template_id}",
	"POST /api/v1/transformation-template/generate",
	"POST /api/v1/transformation-template/simulate",
	"POST /api/v1/transformation-template/oauth/discord",
	"POST /api/v1/transformation-template/oauth/hubspot",
	"POST /api/v1/transformation-template/oauth/slack",
	// The npm client's (2.5.0) calls the Go SDK lacks, its internal ones too.
	"POST /api/v1/auth/stream-portal-access/{stream_id}",
	"POST /api/v1/auth/stream-logout",
	"POST /api/v1/auth/stream/{stream_id}/expire-all",
	"POST /api/v1/auth/stream/{stream_id}/sink/{sink_id}/poller/token/rotate",
	"GET /api/v1/auth/stream/{stream_id}/sink/{sink_id}/poller/token",
	"POST /api/v1/app/{app_id}/autoconfig",
	"POST /api/v1/app/{app_id}/autoconfig/{autoconfig_id}/rotate",
	"GET /api/v1/connector",
	"POST /api/v1/connector",
	"GET /api/v1/connector/{connector_id}",
	"PUT /api/v1/connector/{connector_id}",
	"DELETE /api/v1/connector/{connector_id}",
	"PATCH /api/v1/connector/{connector_id}",
	"GET /api/v1/app/{app_id}/destination",
	"POST /api/v1/app/{app_id}/destination",
	"GET /api/v1/app/{app_id}/destination/{destination_id}",
	"PUT /api/v1/app/{app_id}/destination/{destination_id}",
	"DELETE /api/v1/app/{app_id}/destination/{destination_id}",
	"PATCH /api/v1/app/{app_id}/destination/{destination_id}",
	"GET /api/v1/app/{app_id}/destination/{destination_id}/transformation",
	"PATCH /api/v1/app/{app_id}/destination/{destination_id}/transformation",
	"POST /api/v1/app/{app_id}/endpoint/{endpoint_id}/bulk-replay",
	"POST /api/v1/app/{app_id}/msg/bulk-expunge",
	"GET /api/v1/stream/{stream_id}/sink/{sink_id}/headers",
	"PATCH /api/v1/stream/{stream_id}/sink/{sink_id}/headers",
	"GET /api/v1/stream/event-type",
	"POST /api/v1/stream/event-type",
	"GET /api/v1/stream/event-type/{name}",
	"PUT /api/v1/stream/event-type/{name}",
	"DELETE /api/v1/stream/event-type/{name}",
	"PATCH /api/v1/stream/event-type/{name}",
	"GET /api/v1/stream/{stream_id}/sink/{sink_id}/events",
	"POST /api/v1/stream/{stream_id}/events",
	"GET /api/v1/stream/{stream_id}/sink",
	"POST /api/v1/stream/{stream_id}/sink",
	"GET /api/v1/stream/{stream_id}/sink/{sink_id}",
	"PUT /api/v1/stream/{stream_id}/sink/{sink_id}",
	"DELETE /api/v1/stream/{stream_id}/sink/{sink_id}",
	"PATCH /api/v1/stream/{stream_id}/sink/{sink_id}",
	"GET /api/v1/stream/{stream_id}/sink/{sink_id}/secret",
	"POST /api/v1/stream/{stream_id}/sink/{sink_id}/secret/rotate",
	"GET /api/v1/stream/{stream_id}/sink/{sink_id}/transformation",
	"PATCH /api/v1/stream/{stream_id}/sink/{sink_id}/transformation",
	"GET /api/v1/stream",
	"POST /api/v1/stream",
	"GET /api/v1/stream/{stream_id}",
	"PUT /api/v1/stream/{stream_id}",
	"DELETE /api/v1/stream/{stream_id}",
	"PATCH /api/v1/stream/{stream_id}",
	"GET /api/v1/app/{app_id}/autoconfig/{autoconfig_id}",
	"PUT /api/v1/app/{app_id}/autoconfig/{autoconfig_id}/destination",
	"PUT /api/v1/app/{app_id}/autoconfig/{autoconfig_id}/endpoint",
	"PUT /api/v1/app/{app_id}/endpoint/{endpoint_id}/auto-config",
	"GET /api/v1/app/{app_id}/polling-endpoint/{sink_id}/consumer/{consumer_id}",
	"POST /api/v1/app/{app_id}/polling-endpoint/{sink_id}/consumer/{consumer_id}/commit",
	"GET /ingest/api/v1/source",
	"POST /ingest/api/v1/source",
	"GET /ingest/api/v1/source/{source_id}",
	"PUT /ingest/api/v1/source/{source_id}",
	"DELETE /ingest/api/v1/source/{source_id}",
	"POST /ingest/api/v1/source/{source_id}/token/rotate",
	"POST /ingest/api/v1/source/{source_id}/dashboard",
	"GET /ingest/api/v1/source/{source_id}/endpoint",
	"POST /ingest/api/v1/source/{source_id}/endpoint",
	"GET /ingest/api/v1/source/{source_id}/endpoint/{endpoint_id}",
	"PUT /ingest/api/v1/source/{source_id}/endpoint/{endpoint_id}",
	"DELETE /ingest/api/v1/source/{source_id}/endpoint/{endpoint_id}",
	"GET /ingest/api/v1/source/{source_id}/endpoint/{endpoint_id}/headers",
	"PUT /ingest/api/v1/source/{source_id}/endpoint/{endpoint_id}/headers",
	"GET /ingest/api/v1/source/{source_id}/endpoint/{endpoint_id}/secret",
	"POST /ingest/api/v1/source/{source_id}/endpoint/{endpoint_id}/secret/rotate",
	"GET /ingest/api/v1/source/{source_id}/endpoint/{endpoint_id}/transformation",
	"PATCH /ingest/api/v1/source/{source_id}/endpoint/{endpoint_id}/transformation",
}

// svixUnsupported is the route of SvixUnsupported that r matches ({name}
// is one segment), the one with the most literal segments, or "". Not a
// ServeMux: Svix's own routes overlap in ways it refuses to register
// (GET /api/v1/stream/event-type/{name} and …/stream/{stream_id}/sink).
func svixUnsupported(r *http.Request) string {
	path := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	best, most := "", -1
	for _, route := range SvixUnsupported {
		method, pattern, _ := strings.Cut(route, " ")
		segs := strings.Split(strings.Trim(pattern, "/"), "/")
		if method != r.Method || len(segs) != len(path) {
			continue
		}
		literal := 0
		for i, seg := range segs {
			if strings.HasPrefix(seg, "{") {
				continue
			}
			if seg != path[i] {
				literal = -1
				break
			}
			literal++
		}
		if literal > most {
			best, most = route, literal
		}
	}
	return best
}

func errNotImplemented(what string) *apiError {
	return &apiError{Status: http.StatusNotImplemented, Code: "not_implemented",
		Message: "hookd does not implement " + what + " (see docs/svix.md)"}
}

// svixRoute registers an authenticated Svix handler: the same tokens as
// /v1 and the same portal rule (portalCheck), its errors in Svix's shape.
func (s *Server) svixRoute(pattern string, h handler) { s.svixRouteCounted(pattern, h, nil) }

func (s *Server) svixRouteCounted(pattern string, h handler, rejected func(code string)) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		p, err := s.authenticate(r.Context(), r.Header.Get("Authorization"))
		if err == nil {
			err = portalCheck(p, pattern)
		}
		if err == nil {
			r = r.WithContext(audit.WithActor(r.Context(), audit.Actor{ID: p.actor(), Addr: r.RemoteAddr}))
			err = h(w, r, p)
		}
		if err != nil {
			ae := s.errorFor(w, r, began, err)
			writeJSON(w, ae.Status, svixBody(svixNames(ae)))
			if rejected != nil {
				rejected(ae.Code)
			}
		}
	})
}

// svixRequest trims the trailing slash older Svix SDKs put on paths
// (POST …/recover/), so both spellings reach one route.
func svixRequest(r *http.Request) *http.Request {
	p := r.URL.Path
	if !strings.HasPrefix(p, svixPrefix) || len(p) <= len(svixPrefix) || !strings.HasSuffix(p, "/") {
		return r
	}
	r2 := new(http.Request)
	*r2 = *r
	u := *r.URL
	u.Path, u.RawPath = strings.TrimRight(p, "/"), ""
	r2.URL = &u
	return r2
}

// svixFieldNames renames /v1's fields in errors from the validation both
// APIs share to the Svix field the caller sent.
var svixFieldNames = map[string]string{
	"type": "eventType", "idempotency_key": "eventId", "event_types": "filterTypes",
	"rate_limit": "rateLimit", "tenant_id": "app_id",
}

func svixNames(ae *apiError) *apiError {
	if ae.Field == "" {
		return ae
	}
	base, rest := ae.Field, ""
	if i := strings.IndexAny(base, "[."); i >= 0 {
		base, rest = base[:i], base[i:]
	}
	name, ok := svixFieldNames[base]
	if !ok {
		return ae
	}
	out := *ae // never change a shared error value
	out.Field = name + rest
	out.Message = strings.Replace(ae.Message, ae.Field, out.Field, 1)
	return &out
}

// svixPage answers a list in Svix's envelope, limit being the page size
// applied. The iterator is the store's cursor; paging backwards
// (prevIterator) is not offered.
func svixPage[T, J any](w http.ResponseWriter, page store.Page[T], limit int, toJSON func(T) J) {
	data := make([]J, len(page.Data))
	for i, v := range page.Data {
		data[i] = toJSON(v)
	}
	var iter any
	if page.NextCursor != "" {
		iter = page.NextCursor
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data, "iterator": iter, "prevIterator": nil,
		"done": page.NextCursor == "", "limit": limit})
}

// svixDecode reads a Svix call's body as decode does, passing over
// unknown members, and answers what it refuses as Svix's server does: a
// body that does not decode (bad JSON, a field of the wrong type) is a 422
// at ["body", field], not /v1's 400. A body too large stays a 413.
func svixDecode(w http.ResponseWriter, r *http.Request, v any) error {
	err := decodeJSON(w, r, v, false)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusBadRequest {
		out := *ae
		out.Status, out.Code = http.StatusUnprocessableEntity, "invalid"
		return &out
	}
	return err
}

// errQuery is a bad query parameter, as Svix answers it: 422 at ["query", name].
func errQuery(name, msg string) *apiError {
	return &apiError{Status: http.StatusUnprocessableEntity, Code: "invalid", Field: "query." + name, Message: name + ": " + msg}
}

// svixList reads limit (1-250, default 50; hookd answers at most 100 a
// page) and iterator. An iterator starting with "-" asks for the page
// before, which hookd does not offer.
func svixList(r *http.Request) (limit int, iterator string, err error) {
	q := r.URL.Query()
	limit = 50
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 250 {
			return 0, "", errQuery("limit", "must be a whole number from 1 to 250")
		}
	}
	iterator = q.Get("iterator")
	if strings.HasPrefix(iterator, "-") {
		return 0, "", errQuery("iterator", "hookd pages forward only (prevIterator is always null)")
	}
	return store.PageLimit(limit), iterator, nil
}

// svixUnfiltered refuses filters hookd cannot apply (channels and tags
// do not exist here): ignoring one would answer a list that looks
// filtered and is not.
func svixUnfiltered(r *http.Request, names ...string) error {
	q := r.URL.Query()
	for _, n := range names {
		if q.Has(n) {
			return errNotImplemented("filtering by " + n)
		}
	}
	return nil
}

// svixQueryTime reads an optional RFC 3339 time query parameter.
func svixQueryTime(r *http.Request, name string) (time.Time, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	return parseTime(name, v, errQuery)
}

// svixQueryList reads a list query parameter, given repeated or
// comma-separated (the Go SDK joins with commas).
func svixQueryList(r *http.Request, name string) []string {
	var out []string
	for _, v := range r.URL.Query()[name] {
		for _, x := range strings.Split(v, ",") {
			if x = strings.TrimSpace(x); x != "" {
				out = append(out, x)
			}
		}
	}
	return out
}

// Svix's ID prefixes for hookd's objects. Both spellings are taken in:
// a message's svix-id header carries the evt_ ID hookd signs.
func svixID(hookdID, from, to string) string {
	if rest, ok := strings.CutPrefix(hookdID, from+"_"); ok {
		return to + "_" + rest
	}
	return hookdID
}

func msgID(eventID string) string  { return svixID(eventID, "evt", "msg") }
func eventID(msgID string) string  { return svixID(msgID, "msg", "evt") }
func epID(subID string) string     { return svixID(subID, "sub", "ep") }
func subIDOf(epID string) string   { return svixID(epID, "ep", "sub") }
func taskID(jobID string) string   { return svixID(jobID, "rpl", "qtask") }
func jobIDOf(taskID string) string { return svixID(taskID, "qtask", "rpl") }
func attemptID(a core.Attempt) string {
	return svixID(a.DeliveryID, "dlv", "atmpt") + "_" + strconv.Itoa(a.N)
}

// attemptRef reads attemptID back: the delivery and the attempt's number.
func attemptRef(id string) (deliveryID string, n int, ok bool) {
	i := strings.LastIndexByte(id, '_')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(id[i+1:])
	if err != nil || n < 1 {
		return "", 0, false
	}
	return svixID(id[:i], "atmpt", "dlv"), n, true
}

// svixApp resolves {app_id}: a tenant ID, else an application's uid. A
// tenant key reaches its own tenant only: any other answers 404.
func (s *Server) svixApp(ctx context.Context, p principal, ref string) (core.Tenant, error) {
	t, err := s.Store.TenantGet(ctx, ref)
	if errors.Is(err, store.ErrNotFound) {
		t, err = s.Store.TenantByUID(ctx, ref)
	}
	if err != nil {
		return core.Tenant{}, err
	}
	if !p.admin && t.ID != p.tenantID {
		return core.Tenant{}, store.ErrNotFound
	}
	return t, nil
}

// svixEndpoint resolves {endpoint_id} in a tenant: an ep_ or sub_ ID,
// else an endpoint's uid.
func (s *Server) svixEndpoint(ctx context.Context, tenant, ref string) (core.Subscription, error) {
	sub, err := s.Store.SubscriptionGet(ctx, tenant, subIDOf(ref))
	if errors.Is(err, store.ErrNotFound) {
		sub, err = s.Store.SubscriptionByUID(ctx, tenant, ref)
	}
	return sub, err
}

// svixAppEndpoint resolves {app_id} and {endpoint_id} of r.
func (s *Server) svixAppEndpoint(r *http.Request, p principal) (core.Subscription, error) {
	app, err := s.svixApp(r.Context(), p, r.PathValue("app_id"))
	if err != nil {
		return core.Subscription{}, err
	}
	return s.svixEndpoint(r.Context(), app.ID, r.PathValue("endpoint_id"))
}

// optional reads a member that may be absent (set false), null (set,
// null) or a value into v, naming field in the error.
func optional(field string, raw jsontext.Value, v any) (set, null bool, err error) {
	if len(raw) == 0 {
		return false, false, nil
	}
	if string(raw) == "null" {
		return true, true, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, false, errInvalid(field, "has the wrong type")
	}
	return true, false, nil
}

// svixUID checks an application's or endpoint's uid as Svix does.
func svixUID(field, uid string) error {
	if len(uid) < 1 || len(uid) > 256 || strings.Trim(uid, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "" {
		return errInvalid(field, "must be 1-256 letters, digits, -, _ or .")
	}
	return nil
}

// svixMetadata bounds metadata: it is stored as given and shown again.
func svixMetadata(m map[string]string) error {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	if n > 4096 {
		return errInvalid("metadata", "must hold at most 4096 bytes of keys and values")
	}
	return nil
}

func svixRateLimit(field string, n int) error {
	if n < 0 || n > 65535 {
		return errInvalid(field, "must be from 0 to 65535")
	}
	return nil
}

// orEmptyMap shows a missing map as {} (Svix always answers an object).
func orEmptyMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// svixRate shows a /v1 rate_limit as Svix's whole number of messages a
// second: 0 (none) as null, any other rounded up into 1..65535, so that a
// limit is never shown as none or as less than it is. What was shown,
// written back, keeps the rate (svixRateKept).
func svixRate(r float64) *int {
	if r <= 0 {
		return nil
	}
	n := int(min(math.Ceil(r), 65535))
	return &n
}

// svixRateKept: n is how r is shown, so writing it back changes nothing
// (a read, edit and write of an endpoint would round 0.5 to 1 or 2.7 to 3,
// and 0.5 was shown as null: none).
func svixRateKept(r float64, n int) bool {
	v := svixRate(r)
	return v != nil && *v == n
}

func nullIfZero(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
