package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"hookd/internal/core"
	"hookd/internal/testenv"
	"hookd/webhook"
)

// answer is one API call's raw answer, kept to be searched.
type answer struct {
	call   string
	status int
	body   []byte
}

// recorder calls the API and keeps every raw answer.
type recorder struct {
	t       *testing.T
	base    string
	answers []answer
}

func (r *recorder) do(method, path string, body any) (int, map[string]any) {
	r.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			r.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, r.base+path, rd)
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r.answers = append(r.answers, answer{method + " " + path, resp.StatusCode, raw})
	out := map[string]any{}
	if len(raw) > 0 && strings.Contains(resp.Header.Get("Content-Type"), "json") { // not /metrics' text
		if err := json.Unmarshal(raw, &out); err != nil {
			r.t.Fatalf("%s %s: %s", method, path, raw)
		}
	}
	return resp.StatusCode, out
}

func (r *recorder) must(want int, method, path string, body any) map[string]any {
	r.t.Helper()
	st, out := r.do(method, path, body)
	if st != want {
		r.t.Fatalf("%s %s: %d, want %d: %v", method, path, st, want, out)
	}
	return out
}

// secretsRun is what secretsFlow did: the secrets, API keys and header
// values it gave or got, and which answer was allowed to show which.
type secretsRun struct {
	secrets []string          // every whsec_ secret hookd issued
	keys    []string          // every API key hookd issued
	values  []string          // every header value given
	shows   map[string]string // answer index (as text) -> the one secret it may show
	answers []answer
}

// secretsFlow creates two subscriptions with known header values and an
// API key on a running node, reads, lists, patches and rotates them,
// checks a delivery arrives with the headers and a valid signature, then
// reads every route (readEverything).
func secretsFlow(t *testing.T, e *env) secretsRun {
	t.Helper()
	r := &recorder{t: t, base: e.base}
	run := secretsRun{shows: map[string]string{}}
	tag := strings.ToLower(core.NewID("v"))
	val := func(n string) string { v := "hv-" + n + "-" + tag; run.values = append(run.values, v); return v }

	var ids []string
	rcs := []*testenv.Receiver{testenv.NewReceiver(t), testenv.NewReceiver(t)}
	for i, rc := range rcs {
		out := r.must(201, "POST", "/v1/subscriptions", map[string]any{
			"url": rc.URL + "/hook", "event_types": []string{"secret.test"},
			"headers": map[string]string{"Authorization": "Bearer " + val(fmt.Sprint("auth", i)), "x-api-key": val(fmt.Sprint("key", i))},
		})
		ids = append(ids, out["id"].(string))
		run.secrets = append(run.secrets, out["secret"].(string))
		run.shows[fmt.Sprint(len(r.answers)-1)] = out["secret"].(string)
		want := map[string]any{"Authorization": "[redacted]", "X-Api-Key": "[redacted]"}
		if got := out["headers"].(map[string]any); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("create answered headers %v, want %v", got, want)
		}
	}
	key := r.must(201, "POST", "/v1/tenants/"+core.DefaultTenant+"/keys", map[string]any{"name": "flow"})["api_key"].(string)
	run.keys = append(run.keys, key)
	run.shows[fmt.Sprint(len(r.answers)-1)] = key
	r.must(200, "GET", "/v1/subscriptions/"+ids[0], nil)
	r.must(200, "GET", "/v1/subscriptions", nil)
	patched := r.must(200, "PATCH", "/v1/subscriptions/"+ids[0], map[string]any{
		"headers": map[string]string{"Authorization": "Bearer " + val("auth-patched"), "X-Tenant": val("tenant-patched")}})
	if got := fmt.Sprint(patched["headers"]); got != "map[Authorization:[redacted] X-Tenant:[redacted]]" {
		t.Errorf("PATCH answered headers %s", got)
	}
	rot := r.must(200, "POST", "/v1/subscriptions/"+ids[0]+"/rotate-secret", nil)
	run.secrets = append(run.secrets, rot["secret"].(string))
	run.shows[fmt.Sprint(len(r.answers)-1)] = rot["secret"].(string)
	r.must(200, "GET", "/v1/subscriptions/"+ids[0], nil)
	r.must(200, "GET", "/v1/subscriptions", nil)

	ev := r.must(202, "POST", "/v1/events", map[string]any{"type": "secret.test", "payload": map[string]any{"n": 1}})
	testenv.Eventually(t, 10*time.Second, "both deliveries arrive", func() bool {
		return rcs[0].Count() >= 1 && rcs[1].Count() >= 1
	})
	for i, want := range []struct {
		secret  string // the current one; the previous signs too after the rotation
		headers map[string]string
	}{
		{run.secrets[2], map[string]string{"Authorization": "Bearer hv-auth-patched-" + tag, "X-Tenant": "hv-tenant-patched-" + tag, "X-Api-Key": ""}},
		{run.secrets[1], map[string]string{"Authorization": "Bearer hv-auth1-" + tag, "X-Api-Key": "hv-key1-" + tag}},
	} {
		req := rcs[i].Requests()[0]
		if req.Header.Get("webhook-id") != ev["id"] {
			t.Fatalf("subscription %d got %s, want event %s", i, req.Header.Get("webhook-id"), ev["id"])
		}
		for k, v := range want.headers {
			if req.Header.Get(k) != v {
				t.Errorf("subscription %d: delivery header %s = %q, want %q", i, k, req.Header.Get(k), v)
			}
		}
		if err := webhook.Verify(want.secret, req.Header, req.Body, time.Now(), webhook.DefaultTolerance); err != nil {
			t.Errorf("subscription %d: the signature does not verify under its secret: %v", i, err)
		}
		ts := req.Header.Get("webhook-timestamp")
		if sig := independentSignature(t, want.secret, ev["id"].(string), ts, req.Body); !strings.Contains(req.Header.Get("webhook-signature"), sig) {
			t.Errorf("subscription %d: signature %q lacks the independent HMAC %q", i, req.Header.Get("webhook-signature"), sig)
		}
	}
	readEverything(t, r, core.DefaultTenant, ids[0], ev["id"].(string), "secret.test")
	run.answers = r.answers
	return run
}

// readEverything calls every GET route GET /openapi.json documents, hookd's
// and the Svix-compatible ones, on the objects the flow made (subscription
// sub of tenant, event ev of type typ), so that every answer after creation
// is searched; a route added later is walked too. GET …/endpoint/{id}/secret
// is left out: it is Svix's one way to read an endpoint's secret, and shows
// it by contract (docs/svix.md).
func readEverything(t *testing.T, r *recorder, tenant, sub, ev, typ string) {
	t.Helper()
	dlv := r.must(200, "GET", "/v1/events/"+ev, nil)["deliveries"].([]any)[0].(map[string]any)["id"].(string)
	r.must(201, "POST", "/api/v1/event-type", map[string]any{"name": typ, "description": "the flow's"})
	task := r.must(202, "POST", "/api/v1/app/"+tenant+"/endpoint/"+sub+"/recover", map[string]any{"since": "2020-01-01T00:00:00Z"})["id"].(string)
	job := r.must(200, "GET", "/v1/subscriptions/"+sub+"/replays", nil)["data"].([]any)[0].(map[string]any)["id"].(string)
	var attempt string
	testenv.Eventually(t, 10*time.Second, "the message's attempt recorded", func() bool {
		_, out := r.do("GET", "/api/v1/app/"+tenant+"/attempt/msg/"+ev, nil)
		data, _ := out["data"].([]any)
		if len(data) == 0 {
			return false
		}
		attempt = data[0].(map[string]any)["id"].(string)
		return true
	})
	ids := map[string]string{"subscriptions": sub, "events": ev, "deliveries": dlv, "replays": job, "tenants": tenant,
		"app": tenant, "endpoint": sub, "msg": ev, "attempt": attempt, "background-task": task, "event-type": typ}
	read := 0
	for _, op := range allDocumentedOperations(t, r.base) {
		if op.method != "GET" || strings.HasSuffix(op.path, "/endpoint/{endpoint_id}/secret") {
			continue
		}
		path := fill(t, op.path, ids)
		if st, out := r.do("GET", path, nil); st == http.StatusNotFound || (st >= 500 && st != http.StatusNotImplemented) {
			t.Errorf("GET %s: %d %v, want an answer to search", path, st, out)
		}
		read++
	}
	if read < 30 {
		t.Fatalf("read %d documented GET routes, want every one", read)
	}
}

// needles are what must be found nowhere: each secret whole and its key
// part, each API key, each header value.
func (run secretsRun) needles() []string {
	var out []string
	for _, s := range run.secrets {
		out = append(out, s, strings.TrimPrefix(s, "whsec_"))
	}
	out = append(out, run.keys...)
	return append(out, run.values...)
}

// checkAnswers fails if an answer shows a header value, or a secret other
// than the one its call hands out (create and rotate: the new secret).
func (run secretsRun) checkAnswers(t *testing.T) {
	t.Helper()
	for i, a := range run.answers {
		allowed := run.shows[fmt.Sprint(i)]
		for _, n := range run.needles() {
			if bytes.Contains(a.body, []byte(n)) && !strings.Contains(allowed, n) {
				t.Errorf("answer to %s shows %q: %s", a.call, n, a.body)
			}
		}
	}
}

// notIn fails if any needle is in text.
func notIn(t *testing.T, where string, text []byte, needles []string) {
	t.Helper()
	if len(text) == 0 {
		return
	}
	for _, n := range needles {
		if bytes.Contains(text, []byte(n)) {
			t.Errorf("%s holds %q", where, n)
		}
	}
}

// Secrets and endpoint header values, given and issued through the real
// API on a real node, are found nowhere but where the contract shows them:
// not in the database file, its WAL, the node's log, or any answer but
// create's and rotate's own secret. The files are 0600.
func TestSecretsFoundNowhereSQLite(t *testing.T) {
	t.Parallel()
	var logs logBuffer
	dir := t.TempDir()
	db := filepath.Join(dir, "hookd.db")
	e, stop := serveStoppable(t, Config{DB: db, AdminToken: adminToken, Version: "test",
		AllowNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Log:           slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	run := secretsFlow(t, e)

	files := []string{db, db + "-wal", db + "-shm"}
	check := func(when string) {
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			notIn(t, filepath.Base(f)+" "+when, b, run.needles())
		}
	}
	check("while running")
	for _, f := range append(files, db+".key") {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, want mode 0600", filepath.Base(f), fi.Mode().Perm())
		}
	}
	if !strings.Contains(logs.String(), "generated a secret key file") {
		t.Errorf("the node did not log that it generated a key file:\n%s", logs.String())
	}
	run.checkAnswers(t)
	stop()
	check("after shutdown")
	notIn(t, "the log", []byte(logs.String()), run.needles())
}

// The same on PostgreSQL: the raw rows of every table of hookd's schema.
func TestSecretsFoundNowherePostgres(t *testing.T) {
	t.Parallel()
	db := testenv.PostgresSchema(t)
	var logs logBuffer
	e, stop := serveStoppable(t, Config{DB: db, AdminToken: adminToken, Version: "test", Node: "n1", Keys: clusterKeys,
		AllowNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Log:           slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	run := secretsFlow(t, e)
	tables := postgresTables(t, db)
	for _, want := range []string{"subscriptions", "events", "deliveries", "attempts", "audit_log", "api_keys"} {
		if !slices.Contains(tables, want) {
			t.Fatalf("the schema's tables %v lack %s", tables, want)
		}
	}
	for _, table := range tables {
		notIn(t, "table "+table, postgresTableBytes(t, db, table), run.needles())
	}
	if rows := testenv.PostgresRows(t, db, "SELECT secret, prev_secret, headers FROM subscriptions"); strings.Count(rows, "sealed:v1:") < 5 {
		t.Errorf("want 2 secrets, 1 previous secret and 2 header sets sealed, got:\n%s", rows)
	}
	run.checkAnswers(t)
	stop()
	notIn(t, "the log", []byte(logs.String()), run.needles())
}

// postgresTables lists the tables of the schema db names (hookd's), from
// information_schema: a table added later is searched too.
func postgresTables(t *testing.T, db string) []string {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return tables
}

// postgresTableBytes is every value of every row of table: bytes as they
// are stored (a bytea column rendered as text would hide them), anything
// else as text.
func postgresTableBytes(t *testing.T, db, table string) []byte {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT * FROM "+pgx.Identifier{table}.Sanitize())
	if err != nil {
		t.Fatalf("reading %s: %v", table, err)
	}
	defer rows.Close()
	var out bytes.Buffer
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatalf("reading %s: %v", table, err)
		}
		for _, v := range vals {
			if b, ok := v.([]byte); ok {
				out.Write(b)
			} else {
				fmt.Fprint(&out, v)
			}
			out.WriteByte('\n')
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("reading %s: %v", table, err)
	}
	return out.Bytes()
}

// serveStoppable is serve whose node the test can stop before it ends
// (stop is safe to call again; the cleanup calls it).
func serveStoppable(t *testing.T, cfg Config) (*env, func()) {
	t.Helper()
	a, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go a.Serve(ln)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := a.Shutdown(ctx); err != nil {
				t.Errorf("shutdown: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	base := "http://" + ln.Addr().String()
	return &env{t: t, app: a, base: base, admin: &testenv.Client{T: t, Base: base, Token: adminToken}}, stop
}

// Endpoint headers through the API: shown redacted, replaced by PATCH,
// cleared by {}, sent with every attempt; bad ones refused naming the
// header, with nothing written. A URL with credentials is refused,
// pointing to headers.
func TestEndpointHeadersAPI(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	id, _ := e.subscribe(e.admin, rc.URL, []string{"*"}, map[string]any{"headers": map[string]string{"X-Api-Key": "k1"}})
	count := func() int { return len(e.admin.Must(200, "GET", "/v1/subscriptions", nil)["data"].([]any)) }
	headersOf := func() string { return fmt.Sprint(e.admin.Must(200, "GET", "/v1/subscriptions/"+id, nil)["headers"]) }

	many := map[string]string{}
	for i := range core.MaxHeaders + 1 {
		many[fmt.Sprintf("X-H%d", i)] = "v"
	}
	for _, c := range []struct {
		name          string
		body          map[string]any
		status        int
		field, saying string
	}{
		{"webhook-*", map[string]any{"headers": map[string]string{"Webhook-Signature": "v1,x"}}, 422, "headers.Webhook-Signature", "set by hookd"},
		{"content-type", map[string]any{"headers": map[string]string{"content-type": "text/plain"}}, 422, "headers.content-type", "set by hookd"},
		{"host", map[string]any{"headers": map[string]string{"Host": "internal"}}, 422, "headers.Host", "set by hookd"},
		{"hop-by-hop", map[string]any{"headers": map[string]string{"Transfer-Encoding": "chunked"}}, 422, "headers.Transfer-Encoding", "hop-by-hop"},
		{"CRLF", map[string]any{"headers": map[string]string{"X-Key": "a\r\nX-Evil: 1"}}, 422, "headers.X-Key", "control characters"},
		{"NUL", map[string]any{"headers": map[string]string{"X-Key": "a\x00"}}, 422, "headers.X-Key", "control characters"},
		{"bad name", map[string]any{"headers": map[string]string{"X Key": "a"}}, 422, "headers.X Key", "not a valid header name"},
		{"too many", map[string]any{"headers": many}, 422, "headers", "at most 20"},
		{"too big", map[string]any{"headers": map[string]string{"X-Big": strings.Repeat("a", 5000)}}, 422, "headers", "4096 bytes"},
		// The decoder names a type error by its Go path (today
		// "subscriptionFields.headers"), so only the end is checked.
		{"not an object", map[string]any{"headers": "Authorization: x"}, 400, "headers", "object"},
		{"value not a string", map[string]any{"headers": map[string]any{"X-N": 1}}, 400, "headers", "string"},
		{"url with credentials", map[string]any{"url": strings.Replace(rc.URL, "http://", "http://alice:s3cr3t@", 1)}, 422, "url", "headers"},
	} {
		t.Run(c.name, func(t *testing.T) {
			create := map[string]any{"url": rc.URL, "event_types": []string{"*"}}
			for k, v := range c.body {
				create[k] = v
			}
			before := count()
			st, out := e.admin.Do("POST", "/v1/subscriptions", create)
			errBody, _ := out["error"].(map[string]any)
			msg, _ := errBody["message"].(string)
			if st != c.status || !strings.HasSuffix(errField(out), c.field) || !strings.Contains(msg, c.saying) {
				t.Errorf("create: %d %v, want %d on %s saying %q", st, out, c.status, c.field, c.saying)
			}
			if n := count(); n != before {
				t.Errorf("a refused create wrote a subscription (%d, was %d)", n, before)
			}
			st, out = e.admin.Do("PATCH", "/v1/subscriptions/"+id, c.body)
			if st != c.status || !strings.HasSuffix(errField(out), c.field) {
				t.Errorf("PATCH: %d %v, want %d on %s", st, out, c.status, c.field)
			}
			if h := headersOf(); h != "map[X-Api-Key:[redacted]]" {
				t.Errorf("a refused PATCH changed the headers to %s", h)
			}
			if strings.Contains(fmt.Sprint(out), "s3cr3t") {
				t.Errorf("the refusal repeats the password: %v", out)
			}
		})
	}

	send := func() http.Header {
		t.Helper()
		n := rc.Count()
		e.waitDelivery(e.onlyDelivery(e.post(e.admin, "a.b", map[string]any{})), "delivered", 10*time.Second)
		return rc.Requests()[n].Header
	}
	if h := send(); h.Get("X-Api-Key") != "k1" {
		t.Errorf("X-Api-Key %q, want k1", h.Get("X-Api-Key"))
	}
	e.admin.Must(200, "PATCH", "/v1/subscriptions/"+id, map[string]any{"state": "active"}) // no headers: kept
	if h := headersOf(); h != "map[X-Api-Key:[redacted]]" {
		t.Errorf("a PATCH without headers changed them to %s", h)
	}
	e.admin.Must(200, "PATCH", "/v1/subscriptions/"+id, map[string]any{"headers": map[string]string{"authorization": "Bearer t2"}})
	if h := send(); h.Get("Authorization") != "Bearer t2" || h.Get("X-Api-Key") != "" {
		t.Errorf("after PATCH replacing the set: Authorization %q, X-Api-Key %q", h.Get("Authorization"), h.Get("X-Api-Key"))
	}
	e.admin.Must(200, "PATCH", "/v1/subscriptions/"+id, map[string]any{"headers": map[string]string{}})
	if h := headersOf(); h != "map[]" {
		t.Errorf("after PATCH {}: headers %s, want none", h)
	}
	if h := send(); h.Get("Authorization") != "" {
		t.Errorf("after clearing: Authorization %q still sent", h.Get("Authorization"))
	}
}
