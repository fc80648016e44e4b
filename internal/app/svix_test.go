package app

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"hookd/internal/testenv"
)

// supportRow is one row of docs/svix.md's table of SDK calls: call is
// its first name (the Go SDK's, else the npm client's), names all it gives.
type supportRow struct {
	call, method, path, state string
	names                     []string
	answer                    int
}

var (
	supportLine = regexp.MustCompile("^\\| (`([^`]+)`[^|]*)\\| `([A-Z]+) (/[^`]+)` \\| (supported|partial|not supported) \\| (\\d{3}) \\|")
	backticked  = regexp.MustCompile("`([^`]+)`")
)

func supportTable(t *testing.T) []supportRow {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "svix.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []supportRow
	for _, line := range strings.Split(string(raw), "\n") {
		m := supportLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var answer int
		for _, c := range m[6] {
			answer = answer*10 + int(c-'0')
		}
		var names []string
		for _, n := range backticked.FindAllStringSubmatch(m[1], -1) {
			names = append(names, n[1])
		}
		rows = append(rows, supportRow{call: m[2], names: names, method: m[3], path: m[4], state: m[5], answer: answer})
	}
	if len(rows) < 140 {
		t.Fatalf("docs/svix.md's table has %d rows; it lists every SDK call", len(rows))
	}
	return rows
}

// svixCode is the code of a Svix error body ({code, detail}).
func svixCode(out map[string]any) string {
	c, _ := out["code"].(string)
	return c
}

// Every call in docs/svix.md's table answers as the table says: a
// supported or partial one succeeds with its status (a valid request, on
// real fixtures); one not supported answers Svix's 501 not_implemented.
// Each supported route also answers 401 without a token and, to another
// tenant's key, Svix's 404 (403 where it needs the admin token; event
// types are read by every token), changing nothing.
func TestSvixSupportTable(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	admin := e.admin
	other := e.tenantKey("globex")

	app := admin.Must(http.StatusCreated, "POST", "/api/v1/app", map[string]any{"name": "Table", "uid": "tbl-app"})["id"].(string)
	ep := admin.Must(http.StatusCreated, "POST", "/api/v1/app/"+app+"/endpoint", map[string]any{"url": rc.URL, "uid": "tbl-ep"})["id"].(string)
	ep2 := admin.Must(http.StatusCreated, "POST", "/api/v1/app/"+app+"/endpoint", map[string]any{"url": rc.URL})["id"].(string)
	msg := admin.Must(http.StatusAccepted, "POST", "/api/v1/app/"+app+"/msg", map[string]any{"eventType": "tbl.created", "payload": map[string]any{"n": 1}})["id"].(string)
	var attempt string
	testenv.Eventually(t, 10*time.Second, "the fixture message's attempts", func() bool {
		_, out := admin.Do("GET", "/api/v1/app/"+app+"/attempt/msg/"+msg, nil)
		data, _ := out["data"].([]any)
		if len(data) < 2 {
			return false
		}
		attempt = data[0].(map[string]any)["id"].(string)
		return true
	})
	admin.Must(http.StatusCreated, "POST", "/api/v1/event-type", map[string]any{"name": "tbl.created", "description": "fixture"})
	task := admin.Must(http.StatusAccepted, "POST", "/api/v1/app/"+app+"/endpoint/"+ep2+"/recover", map[string]any{"since": "2020-01-01T00:00:00Z"})["id"].(string)

	ids := map[string]string{"app_id": app, "endpoint_id": ep, "msg_id": msg, "attempt_id": attempt,
		"event_type_name": "tbl.created", "task_id": task}
	fill := func(path string) string {
		return templateParam.ReplaceAllStringFunc(path, func(p string) string {
			if id, ok := ids[p[1:len(p)-1]]; ok {
				return id
			}
			return "x" // an object of a kind hookd does not have
		})
	}
	// Valid bodies, by SDK call (calls sharing a route differ in them).
	bodies := map[string]any{
		"Application.Create":            map[string]any{"name": "New", "uid": "tbl-new"},
		"Application.GetOrCreate":       map[string]any{"name": "Other", "uid": "tbl-other"},
		"Application.Update":            map[string]any{"name": "Renamed", "uid": "tbl-app"},
		"Application.Patch":             map[string]any{"metadata": map[string]string{"a": "b"}},
		"Endpoint.Create":               map[string]any{"url": rc.URL},
		"Endpoint.Update":               map[string]any{"url": rc.URL, "uid": "tbl-ep"},
		"Endpoint.Patch":                map[string]any{"description": "patched"},
		"Endpoint.RotateSecret":         map[string]any{},
		"Endpoint.UpdateHeaders":        map[string]any{"headers": map[string]string{"X-Tenant": "1"}},
		"Endpoint.PatchHeaders":         map[string]any{"headers": map[string]string{"X-Other": "2"}},
		"Endpoint.Recover":              map[string]any{"since": "2020-01-01T00:00:00Z"},
		"Message.Create":                map[string]any{"eventType": "tbl.created", "payload": map[string]any{"n": 2}},
		"EventType.Create":              map[string]any{"name": "tbl.other", "description": "d"},
		"EventType.Update":              map[string]any{"description": "d2"},
		"EventType.Patch":               map[string]any{"description": "d3"},
		"MessageAttempt.Resend":         nil,
		"Application.GetOrCreate?query": "get_if_exists=true",
	}
	rows := supportTable(t)
	// Deletes last, deepest first, so the fixtures live until then.
	rank := func(r supportRow) int {
		if r.method == "DELETE" && r.answer < 300 {
			return 1000 - strings.Count(r.path, "/")
		}
		return 0
	}
	sort.SliceStable(rows, func(i, j int) bool { return rank(rows[i]) < rank(rows[j]) })

	served := map[string]bool{}
	for _, r := range rows {
		route := r.method + " " + r.path
		path := fill(r.path)
		if q, ok := bodies[r.call+"?query"].(string); ok {
			path += "?" + q
		}
		body := bodies[r.call]
		if r.state == "not supported" {
			if r.answer != http.StatusNotImplemented {
				t.Errorf("%s (%s): the table says not supported answers %d; it answers 501", r.call, route, r.answer)
			}
			if st, out := admin.Do(r.method, path, body); st != http.StatusNotImplemented || svixCode(out) != "not_implemented" {
				t.Errorf("%s (%s): %d %v, want 501 not_implemented", r.call, route, st, out)
			}
			continue
		}
		served[route] = true
		if route == "POST /api/v1/auth/logout" {
			continue // a portal session's call, not the admin's: TestPortalSessionSignsOut
		}
		if route != "GET /api/v1/health" {
			e.svixTenancy(r, path, body, other)
		}
		if st, out := admin.Do(r.method, path, body); st != r.answer {
			t.Errorf("%s (%s): %d %v, want %d", r.call, route, st, out, r.answer)
		}
	}
	// Every route the server registers under /api/v1 is in the table.
	for _, op := range documentedSvixOperations(t, e.base) {
		if !served[op] {
			t.Errorf("%s is served but not in docs/svix.md's table", op)
		}
	}
	// Any other path under Svix's prefixes: Svix's 404.
	for _, path := range []string{"/api/v1/no-such-thing", "/api/v1/app/" + app + "/no-such-thing",
		"/api/v1/stream/x/sink/y/nothing", "/ingest/api/v1/source/x/nothing"} {
		if st, out := admin.Do("GET", path, nil); st != http.StatusNotFound || svixCode(out) != "not_found" {
			t.Errorf("GET %s: %d %v, want Svix's 404", path, st, out)
		}
	}
}

// svixTenancy checks one supported route without a token and with
// another tenant's key, before the admin's call.
func (e *env) svixTenancy(r supportRow, path string, body any, other *testenv.Client) {
	e.t.Helper()
	route := r.method + " " + r.path
	for _, tok := range []string{"", "hk_not-a-key"} {
		c := &testenv.Client{T: e.t, Base: e.base, Token: tok}
		if st, out := c.Do(r.method, path, body); st != http.StatusUnauthorized || svixCode(out) != "authentication_failed" {
			e.t.Errorf("%s with token %q: %d %v, want 401 authentication_failed", route, tok, st, out)
		}
	}
	eventTypes := strings.HasPrefix(r.path, "/api/v1/event-type")
	want, code := http.StatusNotFound, "not_found"
	switch {
	case r.path == "/api/v1/app" && r.method == "GET":
		want, code = http.StatusOK, "" // its own application only: checked below
	case r.path == "/api/v1/app", r.method == "DELETE" && r.path == "/api/v1/app/{app_id}",
		eventTypes && r.method != "GET":
		want, code = http.StatusForbidden, "insufficient access"
	case eventTypes:
		want, code = http.StatusOK, ""
	}
	st, out := other.Do(r.method, path, body)
	if st != want || svixCode(out) != code {
		e.t.Errorf("%s as another tenant (%s): %d %v, want %d %s", route, path, st, out, want, code)
	}
	if r.path == "/api/v1/app" && r.method == "GET" {
		for _, a := range out["data"].([]any) {
			if id := a.(map[string]any)["id"]; id != "globex" {
				e.t.Errorf("another tenant's list shows application %v", id)
			}
		}
	}
}

// documentedSvixOperations lists "METHOD /api/v1/…" from GET /openapi.json,
// which internal/api's tests hold equal to the routes registered.
func documentedSvixOperations(t *testing.T, base string) []string {
	t.Helper()
	var out []string
	for _, op := range allDocumentedOperations(t, base) {
		if strings.HasPrefix(op.path, "/api/v1/") {
			out = append(out, op.method+" "+op.path)
		}
	}
	if len(out) < 30 {
		t.Fatalf("openapi.json documents %d /api/v1 operations", len(out))
	}
	return out
}

var (
	npmMethod  = regexp.MustCompile(`\n  (?:public )?(?:async )?(\w+)\(`)
	npmRequest = regexp.MustCompile(`new SvixRequest\(\s*HttpMethod\.(\w+),\s*"([^"]+)"`)
)

// docs/svix.md's table names every call of the npm client sdktest/node
// installs, with its route: each method of its classes (src/api and
// src/api_internal, named file.method) that makes a request.
func TestSvixTableCoversNodeClient(t *testing.T) {
	t.Parallel()
	src := filepath.Join("..", "..", "sdktest", "node", "node_modules", "svix", "src")
	if !exists(src) {
		if os.Getenv("HOOKD_TEST_NODE") == "required" {
			t.Fatalf("HOOKD_TEST_NODE=required but %s is missing (npm ci in sdktest/node)", src)
		}
		t.Skip("sdktest/node has no node_modules (run npm ci there)")
	}
	rows := map[string][]string{} // route: names
	for _, r := range supportTable(t) {
		rows[r.method+" "+r.path] = append(rows[r.method+" "+r.path], r.names...)
	}
	calls := 0
	for _, dir := range []string{"api", "api_internal"} {
		files, err := filepath.Glob(filepath.Join(src, dir, "*.ts"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			class := strings.TrimSuffix(filepath.Base(f), ".ts")
			methods := npmMethod.FindAllSubmatchIndex(raw, -1)
			for _, req := range npmRequest.FindAllSubmatchIndex(raw, -1) {
				method := ""
				for _, m := range methods {
					if m[0] < req[0] {
						method = string(raw[m[2]:m[3]])
					}
				}
				name := class + "." + method
				route := string(raw[req[2]:req[3]]) + " " + string(raw[req[4]:req[5]])
				calls++
				if !slices.Contains(rows[route], name) {
					t.Errorf("the npm client's %s (%s, %s) is not in docs/svix.md's table (that route names %v)", name, route, dir, rows[route])
				}
			}
		}
	}
	if calls < 140 {
		t.Fatalf("found %d calls in the npm client: is %s still its source?", calls, src)
	}
}
