package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"hookd/internal/audit"
	"hookd/internal/metrics"
)

// v1Routes is every authenticated pattern New registers under /v1.
// TestRoutesAreServed checks each one is really served by the mux under that
// exact pattern; TestOpenAPIMatchesRoutes checks openapi.json documents
// exactly these (plus otherRoutes). A route added to New must be added here
// and to openapi.json.
var v1Routes = []string{
	"POST /v1/tenants",
	"POST /v1/events",
	"GET /v1/events/{id}",
	"POST /v1/subscriptions",
	"GET /v1/subscriptions",
	"GET /v1/subscriptions/{id}",
	"PATCH /v1/subscriptions/{id}",
	"DELETE /v1/subscriptions/{id}",
	"POST /v1/subscriptions/{id}/rotate-secret",
	"POST /v1/subscriptions/{id}/test",
	"GET /v1/subscriptions/{id}/deliveries",
	"GET /v1/subscriptions/{id}/health",
	"GET /v1/subscriptions/{id}/stats",
	"GET /v1/stats",
	"POST /v1/subscriptions/{id}/replay",
	"GET /v1/replays/{id}",
	"POST /v1/replays/{id}/cancel",
	"GET /v1/subscriptions/{id}/replays",
	"GET /v1/deliveries/{id}",
	"POST /v1/deliveries/{id}/replay",
	"POST /v1/tenants/{id}/keys",
	"GET /v1/tenants/{id}/keys",
	"DELETE /v1/tenants/{id}/keys/{key_id}",
	"GET /v1/audit",
	"GET /v1/tenants",
	"GET /v1/failing",
	"GET /v1/events",
	"GET /v1/deliveries",
	"GET /v1/event-types",
	"GET /v1/subscriptions/{id}/deliveries/count",
	"POST /v1/tenants/{id}/portal-link",
}

// svixRoutes is every pattern svixRoutes registers under /api/v1 (the
// Svix-compatible API, docs/svix.md), checked like v1Routes.
var svixRoutes = []string{
	"GET /api/v1/health",
	"GET /api/v1/app",
	"POST /api/v1/app",
	"GET /api/v1/app/{app_id}",
	"PUT /api/v1/app/{app_id}",
	"PATCH /api/v1/app/{app_id}",
	"DELETE /api/v1/app/{app_id}",
	"GET /api/v1/app/{app_id}/endpoint",
	"POST /api/v1/app/{app_id}/endpoint",
	"GET /api/v1/app/{app_id}/endpoint/{endpoint_id}",
	"PUT /api/v1/app/{app_id}/endpoint/{endpoint_id}",
	"PATCH /api/v1/app/{app_id}/endpoint/{endpoint_id}",
	"DELETE /api/v1/app/{app_id}/endpoint/{endpoint_id}",
	"GET /api/v1/app/{app_id}/endpoint/{endpoint_id}/secret",
	"POST /api/v1/app/{app_id}/endpoint/{endpoint_id}/secret/rotate",
	"GET /api/v1/app/{app_id}/endpoint/{endpoint_id}/headers",
	"PUT /api/v1/app/{app_id}/endpoint/{endpoint_id}/headers",
	"PATCH /api/v1/app/{app_id}/endpoint/{endpoint_id}/headers",
	"POST /api/v1/app/{app_id}/endpoint/{endpoint_id}/recover",
	"GET /api/v1/app/{app_id}/endpoint/{endpoint_id}/stats",
	"GET /api/v1/app/{app_id}/endpoint/{endpoint_id}/msg",
	"POST /api/v1/app/{app_id}/msg",
	"GET /api/v1/app/{app_id}/msg",
	"GET /api/v1/app/{app_id}/msg/{msg_id}",
	"GET /api/v1/app/{app_id}/msg/{msg_id}/endpoint",
	"POST /api/v1/app/{app_id}/msg/{msg_id}/endpoint/{endpoint_id}/resend",
	"GET /api/v1/app/{app_id}/msg/{msg_id}/attempt/{attempt_id}",
	"GET /api/v1/app/{app_id}/attempt/endpoint/{endpoint_id}",
	"GET /api/v1/app/{app_id}/attempt/msg/{msg_id}",
	"GET /api/v1/event-type",
	"POST /api/v1/event-type",
	"GET /api/v1/event-type/{event_type_name}",
	"PUT /api/v1/event-type/{event_type_name}",
	"PATCH /api/v1/event-type/{event_type_name}",
	"DELETE /api/v1/event-type/{event_type_name}",
	"GET /api/v1/background-task/{task_id}",
	"POST /api/v1/auth/app-portal-access/{app_id}",
	"POST /api/v1/auth/logout",
}

// otherRoutes are the unauthenticated routes outside /v1, also documented.
var otherRoutes = []string{
	"GET /healthz",
	"GET /readyz",
	"GET /openapi.json",
	"GET /metrics",
	"POST /portal/session",
	"DELETE /portal/session", // a portal session's own key
}

func allRoutes() []string {
	return append(append(append([]string{}, v1Routes...), svixRoutes...), otherRoutes...)
}

// pathParam matches a {name} wildcard in a route pattern.
var pathParam = regexp.MustCompile(`\{[a-z_]+\}`)

// Every pattern New registers is listed above, so it is checked against
// the OpenAPI document, which the end-to-end table test in internal/app
// walks to call every route without a key and with another tenant's.
// A route registered without being listed (and so without that check)
// fails here.
func TestEveryRegisteredRouteIsListed(t *testing.T) {
	s := New(Config{Metrics: metrics.New()})
	// The catch-alls: 404 or 405 under /v1, 501 or 404 under Svix's paths.
	listed := map[string]bool{"/v1/": true, "/api/v1/": true, "/ingest/api/v1/": true}
	for _, r := range allRoutes() {
		listed[r] = true
	}
	for _, p := range s.mux.patterns {
		if !listed[p] {
			t.Errorf("New registers %q, which is not in v1Routes or otherRoutes (nor, so, checked against openapi.json)", p)
		}
	}
	if len(s.mux.patterns) != len(listed) {
		t.Errorf("New registers %d patterns, %d are listed: %v", len(s.mux.patterns), len(listed), s.mux.patterns)
	}
}

var openAPIMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func TestRoutesAreServed(t *testing.T) {
	s := New(Config{Metrics: metrics.New()})
	for _, pattern := range allRoutes() {
		method, path, _ := strings.Cut(pattern, " ")
		req := httptest.NewRequest(method, pathParam.ReplaceAllString(path, "x"), nil)
		if _, got := s.mux.Handler(req); got != pattern {
			t.Errorf("%s %s is served by pattern %q, want %q", req.Method, req.URL.Path, got, pattern)
		}
	}
	// The catch-all answers anything else under /v1, so an unlisted route
	// would look served; make sure the catch-all is what a stray path gets.
	req := httptest.NewRequest(http.MethodGet, "/v1/no-such-route", nil)
	if _, got := s.mux.Handler(req); got != "/v1/" {
		t.Errorf("GET /v1/no-such-route is served by %q, want the /v1/ catch-all", got)
	}
}

type openAPIDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		SecuritySchemes map[string]json.RawMessage `json:"securitySchemes"`
		Schemas         map[string]json.RawMessage `json:"schemas"`
	} `json:"components"`
}

func parseOpenAPI(t *testing.T) openAPIDoc {
	t.Helper()
	var doc openAPIDoc
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatalf("openapi.json is not valid JSON: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	return doc
}

// documented returns "METHOD /path" for every operation in the document.
func documented(doc openAPIDoc) map[string]bool {
	ops := map[string]bool{}
	for path, item := range doc.Paths {
		for _, m := range openAPIMethods {
			if _, ok := item[m]; ok {
				ops[strings.ToUpper(m)+" "+path] = true
			}
		}
	}
	return ops
}

func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc := parseOpenAPI(t)
	ops := documented(doc)

	registered := map[string]bool{}
	for _, r := range allRoutes() {
		registered[r] = true
		if !ops[r] {
			t.Errorf("route %s is registered but missing from openapi.json", r)
		}
	}
	var extra []string
	for op := range ops {
		if !registered[op] {
			extra = append(extra, op)
		}
	}
	sort.Strings(extra)
	for _, op := range extra {
		t.Errorf("openapi.json documents %s, which the server does not register", op)
	}
}

func TestOpenAPIShape(t *testing.T) {
	doc := parseOpenAPI(t)
	if _, ok := doc.Components.SecuritySchemes["bearerAuth"]; !ok {
		t.Error("components.securitySchemes.bearerAuth is missing")
	}
	if _, ok := doc.Components.Schemas["Error"]; !ok {
		t.Error("components.schemas.Error is missing")
	}

	// Every local $ref must resolve.
	var root any
	if err := json.Unmarshal(openAPI, &root); err != nil {
		t.Fatal(err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				if resolve(root, ref) == nil {
					t.Errorf("$ref %q does not resolve", ref)
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(root)
}

// resolve follows a local JSON pointer reference ("#/a/b"); nil if absent.
func resolve(root any, ref string) any {
	p, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil
	}
	cur := root
	for _, part := range strings.Split(p, "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		if cur, ok = m[part]; !ok {
			return nil
		}
	}
	return cur
}

// A known path asked with a method it has no route for answers 405 naming
// the allowed methods; an unknown path answers 404; neither needs a token.
func TestWrongMethodAnswers405(t *testing.T) {
	s := New(Config{Metrics: metrics.New()})
	for _, c := range []struct {
		method, path, allow string
		status              int
	}{
		{http.MethodPut, "/v1/subscriptions/sub_x", "GET, PATCH, DELETE", 405},
		{http.MethodGet, "/v1/deliveries/dlv_x/replay", "POST", 405},
		{http.MethodDelete, "/v1/events", "GET, POST", 405},
		{http.MethodGet, "/v1/no-such-route", "", 404},
	} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		json.Unmarshal(rec.Body.Bytes(), &body)
		if rec.Code != c.status || rec.Header().Get("Allow") != c.allow {
			t.Errorf("%s %s: %d Allow %q (%s); want %d Allow %q", c.method, c.path, rec.Code, rec.Header().Get("Allow"), body.Error.Message, c.status, c.allow)
		}
		if want := map[int]string{405: "method_not_allowed", 404: "not_found"}[c.status]; body.Error.Code != want {
			t.Errorf("%s %s: code %q, want %q", c.method, c.path, body.Error.Code, want)
		}
	}
}

// The audit actions documented are exactly those hookd writes.
func TestOpenAPIAuditActions(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				AuditEntry struct {
					Properties struct {
						Action struct {
							Enum []string `json:"enum"`
						} `json:"action"`
					} `json:"properties"`
				} `json:"AuditEntry"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	if got := doc.Components.Schemas.AuditEntry.Properties.Action.Enum; !slices.Equal(got, audit.Actions) {
		t.Errorf("openapi.json AuditEntry.action enum %v, want %v", got, audit.Actions)
	}
}

// TestQueryParamsAreRead: the query parameters badQuery lets through are
// openapi.json's, $refs and path-level ones included.
func TestQueryParamsAreRead(t *testing.T) {
	for route, want := range map[string][]string{
		"GET /v1/events":                        {"cursor", "idempotency_key", "limit", "since", "tenant_id", "type", "until"},
		"GET /v1/subscriptions/{id}/stats":      {"granularity", "since", "until"},
		"GET /v1/subscriptions/{id}/deliveries": {"cursor", "event_type", "limit", "since", "state", "until"},
		"POST /v1/events":                       nil,
	} {
		if got := queryParams[route]; !slices.Equal(got, want) {
			t.Errorf("%s takes %v, want %v", route, got, want)
		}
	}
	for _, route := range allRoutes() {
		if _, ok := queryParams[route]; !ok {
			t.Errorf("%s has no entry: a route openapi.json does not document refuses every query parameter", route)
		}
	}
}
