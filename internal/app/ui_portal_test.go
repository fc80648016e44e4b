package app

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"hookd/internal/testenv"
	"hookd/webhook"
)

// The dashboard as a customer portal (issue 14), driven in chromium
// against a real node and loopback receivers.

// signInAs signs in through the form and waits for the endpoints.
func signInAs(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	do(t, ctx, "signing in",
		chromedp.Navigate(base+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS(`#signin button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#new-endpoint")))
}

// shown selects the page once the view of path is drawn.
func shown(path string) chromedp.CSS {
	return chromedp.CSS(`main[data-page="` + path + `"]`)
}

// eval reads a value the page computes.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	return read(t, ctx, chromedp.Evaluate[T](js))
}

// waitHealth polls the API until every subscription's last failure is known.
func waitFailing(t *testing.T, c *testenv.Client, ids ...string) {
	t.Helper()
	for _, id := range ids {
		testenv.Eventually(t, 10*time.Second, id+" to have failed", func() bool {
			h := c.Must(http.StatusOK, "GET", "/v1/subscriptions/"+id+"/health", nil)
			return h["last_failure"] != nil && h["status"] == "failing"
		})
	}
}

// A 5xx endpoint, a refused one and a 400 one each show their cause, in
// words, in the list and in the endpoint's banner, without opening a
// delivery; failing endpoints come first.
func TestDashboardWhyEndpointsFail(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := start(t, true)
	five := status(t, http.StatusInternalServerError, "<html><h1>Internal Server Error</h1></html>")
	four := status(t, http.StatusBadRequest, `{"error":"bad signature"}`)
	ok := testenv.NewReceiver(t)
	slow := map[string]any{"retry_schedule": []string{"1h"}}
	okSub, _ := e.subscribe(e.admin, ok.URL, []string{"*"}, nil)
	fiveSub, _ := e.subscribe(e.admin, five.URL, []string{"*"}, slow)
	refusedSub, _ := e.subscribe(e.admin, closedPort(t), []string{"*"}, slow)
	fourSub, _ := e.subscribe(e.admin, four.URL, []string{"*"}, slow)
	e.post(e.admin, "order.created", map[string]any{"n": 1})
	waitFailing(t, e.admin, fiveSub, refusedSub, fourSub)
	testenv.Eventually(t, 10*time.Second, "the healthy endpoint gets its event", func() bool { return ok.Count() == 1 })

	want := map[string][]string{
		fiveSub:    {"Failing", "HTTP 500 Internal Server Error", "<html><h1>Internal Server Error</h1></html>"},
		refusedSub: {"Failing", "Connection refused"},
		fourSub:    {"Failing", "HTTP 400 Bad Request", `{"error":"bad signature"}`},
		okSub:      {"Healthy"},
	}
	signInAs(t, ctx, e.base, adminToken)
	do(t, ctx, "reading the list", chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+fourSub+`"]`)))
	for id, words := range want {
		row := text(t, ctx, `tr[data-id="`+id+`"]`)
		for _, w := range words {
			if !strings.Contains(row, w) {
				t.Errorf("list row of %s says %q, want it to say %q", id, row, w)
			}
		}
	}
	order := eval[[]string](t, ctx, `[...document.querySelectorAll('table.subs tbody tr')].map((r) => r.dataset.status)`)
	if len(order) != 4 || order[3] != "healthy" {
		t.Errorf("list order by status %v, want the three failing first", order)
	}

	for id, words := range want {
		do(t, ctx, "opening "+id, chromedp.Navigate(e.base+"/ui/#/subscriptions/"+id), chromedp.WaitVisible(shown("/subscriptions/"+id)))
		b := text(t, ctx, "#banner")
		for _, w := range words {
			if !strings.Contains(b, w) {
				t.Errorf("banner of %s says %q, want it to say %q", id, b, w)
			}
		}
		if id != okSub && !strings.Contains(b, "Failing since") {
			t.Errorf("banner of %s says %q, want when it began failing", id, b)
		}
	}
	do(t, ctx, "opening the 500 endpoint", chromedp.Navigate(e.base+"/ui/#/subscriptions/"+fiveSub), chromedp.WaitVisible(shown("/subscriptions/"+fiveSub)))
	if b := text(t, ctx, "#banner"); !strings.Contains(b, "1 waiting") || !strings.Contains(b, "next try") {
		t.Errorf("banner of the retried endpoint %q, want what waits and when it is tried next", b)
	}
}

// The endpoint's charts draw what the API says: the last hour a minute
// each from health, and hours from the stats API (issue 13).
func TestDashboardChartMatchesStats(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	rc.Respond = func(n int, w http.ResponseWriter, _ *http.Request) {
		if n%3 == 2 {
			w.WriteHeader(http.StatusBadRequest) // a third fail at once
			return
		}
		w.WriteHeader(http.StatusOK)
	}
	sub, _ := e.subscribe(e.admin, rc.URL, []string{"*"}, nil)
	for i := range 9 {
		e.post(e.admin, "order.created", map[string]any{"n": i})
	}
	testenv.Eventually(t, 10*time.Second, "every delivery done", func() bool {
		h := e.admin.Must(http.StatusOK, "GET", "/v1/subscriptions/"+sub+"/health", nil)
		return rc.Count() == 9 && h["pending"] == float64(0) && h["failed"] == float64(3)
	})
	signInAs(t, ctx, e.base, adminToken)
	do(t, ctx, "drawing the last hour",
		chromedp.Navigate(e.base+"/ui/#/subscriptions/"+sub),
		chromedp.WaitVisible(chromedp.CSS("#chart-minute")),
		chromedp.Click(chromedp.CSS("#chart-minute")),
		chromedp.WaitReady(chromedp.CSS("#history table.chart-data")))
	drawn := eval[[]int](t, ctx, `['delivered', 'failed'].map((k) =>
		[...document.querySelectorAll('#history table.chart-data td.' + k)].reduce((a, td) => a + Number(td.textContent), 0))`)
	if drawn[0] != 6 || drawn[1] != 3 {
		t.Errorf("the last hour's chart draws %d delivered and %d failed, want the 6 and 3 health counts", drawn[0], drawn[1])
	}

	if st, out := e.admin.Do("GET", "/v1/subscriptions/"+sub+"/stats?granularity=hour", nil); st == http.StatusNotFound {
		t.Skipf("the stats API (issue 13) is not in this tree: GET /v1/subscriptions/{id}/stats answers 404 %v; the hour chart waits for it", out)
	}
	do(t, ctx, "drawing the last 24 hours",
		chromedp.Click(chromedp.CSS("#chart-hour")),
		chromedp.WaitReady(chromedp.CSS("#history figure.chartbox[data-src]")))
	src := eval[string](t, ctx, `document.querySelector('#history figure.chartbox').dataset.src`)
	api := e.admin.Must(http.StatusOK, "GET", src, nil)
	type bucket struct {
		Start                               string
		Delivered, Failed, Skipped, Pending int
	}
	shown := eval[[]bucket](t, ctx, `[...document.querySelectorAll('#history table.chart-data tbody tr')].map((tr) => ({
		Start: tr.dataset.start,
		Delivered: Number(tr.querySelector('td.delivered').textContent), Failed: Number(tr.querySelector('td.failed').textContent),
		Skipped: Number(tr.querySelector('td.skipped').textContent), Pending: Number(tr.querySelector('td.pending').textContent)}))`)
	data := api["data"].([]any)
	if len(shown) != len(data) {
		t.Fatalf("the chart shows %d buckets, %s answers %d", len(shown), src, len(data))
	}
	total := 0
	for i, d := range data {
		d := d.(map[string]any)
		num := func(k string) int { n, _ := d[k].(float64); return int(n) }
		want := bucket{d["start"].(string), num("delivered"), num("failed"), num("skipped"), num("pending")}
		if shown[i] != want {
			t.Errorf("bucket %d: the chart shows %+v, the API says %+v", i, shown[i], want)
		}
		total += want.Delivered + want.Failed
	}
	if total != 9 {
		t.Errorf("the stats count %d finished deliveries, want 9", total)
	}
}

// Self-service: create an endpoint from the form (the API's validation
// shown at the field), send a test event, see it arrive signed, rotate
// the secret, and a delivery afterwards verifies under the new secret.
func TestDashboardSelfService(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	signInAs(t, ctx, e.base, adminToken)
	if empty := text(t, ctx, "main"); !strings.Contains(empty, "No endpoints yet") {
		t.Errorf("the empty list says %q, want what to do", empty)
	}
	do(t, ctx, "a URL the API refuses",
		chromedp.Click(chromedp.CSS("#empty-new")),
		chromedp.WaitVisible(chromedp.CSS("#f-url")),
		chromedp.SendKeys(chromedp.CSS("#f-url"), "ftp://example.com/hook"),
		chromedp.SendKeys(chromedp.CSS("#f-types"), "order.*"),
		chromedp.Click(chromedp.CSS("#save")),
		chromedp.WaitVisible(chromedp.CSS("#err-url")))
	if msg := text(t, ctx, "#err-url"); !strings.Contains(msg, "url") {
		t.Errorf("the URL's error says %q, want the API's message naming url", msg)
	}
	if n := len(e.admin.Must(http.StatusOK, "GET", "/v1/subscriptions", nil)["data"].([]any)); n != 0 {
		t.Fatalf("%d subscriptions after a refused form, want 0", n)
	}
	var secret string
	do(t, ctx, "adding the endpoint",
		chromedp.SetValue(chromedp.CSS("#f-url"), rc.URL+"/hooks"),
		chromedp.Click(chromedp.CSS("#save")),
		chromedp.WaitVisible(chromedp.CSS("#secret")))
	secret = eval[string](t, ctx, `document.getElementById('secret').value`)
	subs := e.admin.Must(http.StatusOK, "GET", "/v1/subscriptions", nil)["data"].([]any)
	if len(subs) != 1 || subs[0].(map[string]any)["url"] != rc.URL+"/hooks" || fmt.Sprint(subs[0].(map[string]any)["event_types"]) != "[order.*]" {
		t.Fatalf("subscriptions after the form: %v", subs)
	}
	verifies := func(n int, secret string) {
		t.Helper()
		r := rc.Requests()[n]
		if err := webhook.Verify(secret, r.Header, r.Body, time.Now(), webhook.DefaultTolerance); err != nil {
			t.Errorf("delivery %d does not verify under %s…: %v", n, secret[:10], err)
		}
		if !strings.Contains(string(r.Body), `"type":"hookd.test"`) {
			t.Errorf("delivery %d is not the test event: %s", n, r.Body)
		}
	}
	do(t, ctx, "sending a test event", chromedp.Click(chromedp.CSS("#send-test")), chromedp.WaitVisible(chromedp.CSS("#flash.info")))
	testenv.Eventually(t, 10*time.Second, "the test event arrives", func() bool { return rc.Count() == 1 })
	verifies(0, secret)

	var rotated string
	do(t, ctx, "rotating the secret",
		chromedp.Click(chromedp.CSS("#open-endpoint")),
		chromedp.WaitVisible(chromedp.CSS("#rotate")),
		chromedp.Click(chromedp.CSS("#rotate")),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS("#secret")))
	rotated = eval[string](t, ctx, `document.getElementById('secret').value`)
	if rotated == secret || !strings.HasPrefix(rotated, "whsec_") {
		t.Fatalf("rotation showed %q, want a new secret", rotated)
	}
	do(t, ctx, "sending another test event", chromedp.Click(chromedp.CSS("#send-test")), chromedp.WaitVisible(chromedp.CSS("#flash.info")))
	testenv.Eventually(t, 10*time.Second, "the second test event arrives", func() bool { return rc.Count() == 2 })
	verifies(1, rotated)
}

// Bulk replay says how many deliveries it will send again, and that the
// endpoint still fails, before it does anything; it asks once; a start in
// the future is refused.
func TestDashboardBulkReplayConfirms(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := start(t, true)
	four := status(t, http.StatusBadRequest, "no")
	sub, _ := e.subscribe(e.admin, four.URL, []string{"*"}, nil)
	for i := range 3 {
		e.post(e.admin, "order.created", map[string]any{"n": i})
	}
	testenv.Eventually(t, 10*time.Second, "three failed", func() bool {
		return e.admin.Must(http.StatusOK, "GET", "/v1/subscriptions/"+sub+"/health", nil)["failed"] == float64(3)
	})
	replays := func() int { return len(auditRows(t, e.admin, "&action=replay.subscription")) }

	signInAs(t, ctx, e.base, adminToken)
	do(t, ctx, "a replay from tomorrow",
		chromedp.Navigate(e.base+"/ui/#/subscriptions/"+sub),
		chromedp.WaitVisible(chromedp.CSS("#replay-preview")))
	eval[string](t, ctx, `document.getElementById('replay-since').value = inputValue(new Date(Date.now() + 86400e3))`)
	do(t, ctx, "asking for it", chromedp.Click(chromedp.CSS("#replay-preview")), chromedp.WaitVisible(chromedp.CSS("#flash.error")))
	if msg := text(t, ctx, "#flash"); !strings.Contains(msg, "future") {
		t.Errorf("a start tomorrow says %q, want it refused as in the future", msg)
	}
	eval[string](t, ctx, `document.getElementById('replay-since').value = inputValue(new Date(Date.now() - 3600e3))`)
	do(t, ctx, "previewing the replay", chromedp.Click(chromedp.CSS("#replay-preview")), chromedp.WaitVisible(chromedp.CSS(".confirm")))
	preview := text(t, ctx, ".confirm")
	if !strings.Contains(preview, "3 failed or skipped deliveries") || !strings.Contains(preview, "still fails (HTTP 400 Bad Request") {
		t.Errorf("the preview says %q, want the count (3) and that the endpoint still answers 400", preview)
	}
	if n := replays(); n != 0 || four.Count() != 3 {
		t.Fatalf("before confirming: %d replays, %d requests; want none started, 3 requests", n, four.Count())
	}
	do(t, ctx, "confirming", chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("main h1")))
	testenv.Eventually(t, 10*time.Second, "the three sent again", func() bool { return four.Count() == 6 })
	if n := replays(); n != 1 {
		t.Errorf("%d bulk replays after confirming once, want 1", n)
	}
	if h := eval[string](t, ctx, `location.hash`); !strings.HasPrefix(h, "#/replays/rpl_") {
		t.Errorf("after confirming the page is %s, want the replay's progress", h)
	}
}

// A portal link signs in to one tenant only, fails on a second use and
// after expiry, and the session ends with the link.
func TestDashboardPortalLink(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := start(t, true)
	acme, globex := e.tenantKey("acme"), e.tenantKey("globex")
	a1, _ := e.subscribe(acme, "http://127.0.0.1:9/acme-one", []string{"*"}, nil)
	a2, _ := e.subscribe(acme, "http://127.0.0.1:9/acme-two", []string{"*"}, nil)
	theirs, _ := e.subscribe(globex, "http://127.0.0.1:9/globex", []string{"*"}, nil)
	link := e.admin.Must(http.StatusCreated, "POST", "/v1/tenants/acme/portal-link", nil)["url"].(string)

	do(t, ctx, "opening the portal link", chromedp.Navigate(link), chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+a2+`"]`)))
	rows := eval[[]string](t, ctx, `[...document.querySelectorAll('table.subs tbody tr')].map((r) => r.dataset.id)`)
	head := text(t, ctx, "header")
	hash := eval[string](t, ctx, `location.hash`)
	switcher := eval[int](t, ctx, `document.querySelectorAll('#tenant-switch').length`)
	if strings.Join(sorted(rows...), " ") != strings.Join(sorted(a1, a2), " ") {
		t.Errorf("the portal lists %v, want acme's two endpoints", rows)
	}
	if !strings.Contains(head, "acme") || !strings.Contains(head, "session ends") || switcher != 0 {
		t.Errorf("the portal's header says %q (%d tenant switchers), want acme, when the session ends, no switcher", head, switcher)
	}
	if strings.Contains(hash, "pt_") {
		t.Errorf("the link's token stays in the address: %s", hash)
	}
	do(t, ctx, "opening another tenant's endpoint", chromedp.Navigate(e.base+"/ui/#/subscriptions/"+theirs), chromedp.WaitVisible(chromedp.CSS("main p.error")))
	if page := text(t, ctx, "main"); !strings.Contains(page, "Not found") || strings.Contains(page, "globex") {
		t.Errorf("another tenant's endpoint shows %q", page)
	}

	for name, url := range map[string]string{
		"a second use":  link,
		"an old link":   e.base + "/ui/#/portal/" + e.storeLink("acme", time.Now().Add(-time.Minute)),
		"a wrong token": e.base + "/ui/#/portal/pt_guess",
	} {
		do(t, ctx, "opening "+name, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#token")), chromedp.WaitVisible(chromedp.CSS("#flash")))
		if msg := text(t, ctx, "#flash"); !strings.Contains(msg, "not valid") {
			t.Errorf("%s says %q, want the link refused", name, msg)
		}
		if tok := eval[string](t, ctx, `sessionStorage.getItem('hookd.token') || ''`); tok != "" {
			t.Errorf("%s left a token in the tab", name)
		}
	}

	short := e.base + "/ui/#/portal/" + e.storeLink("acme", time.Now().Add(3*time.Second))
	do(t, ctx, "opening a link about to expire", chromedp.Navigate(short), chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+a1+`"]`)))
	testenv.Eventually(t, 15*time.Second, "the session to end with its link", func() bool {
		return eval[int](t, ctx, `document.querySelectorAll('#token').length`) == 1
	})
	if msg := text(t, ctx, "#flash"); !strings.Contains(msg, "session has ended") {
		t.Errorf("at the link's expiry the page says %q, want the session ended", msg)
	}
}

// At 390 px (a phone) no page is wider than the screen: tables become
// cards, long URLs and answers wrap. And every control is labelled.
func TestDashboardPhoneWidth(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := start(t, true)
	long := status(t, http.StatusBadGateway, strings.Repeat("upstream-connect-error-or-disconnect-", 25))
	sub, _ := e.subscribe(e.admin, long.URL+"/"+strings.Repeat("a-very-long-path-segment/", 12), []string{"order.*"},
		map[string]any{"retry_schedule": []string{"1h"}})
	e.subscribe(e.admin, "http://127.0.0.1:9/quiet", []string{"invoice.*"}, nil)
	evt := e.post(e.admin, "order.created", map[string]any{"description": strings.Repeat("word-without-spaces", 30)})
	dlv := e.onlyDelivery(evt)
	waitFailing(t, e.admin, sub)
	do(t, ctx, "a phone's screen", chromedp.EmulateViewport(390, 844))
	signInAs(t, ctx, e.base, adminToken)
	for _, page := range []string{"#/", "#/subscriptions/" + sub, "#/subscriptions/" + sub + "/edit", "#/new",
		"#/deliveries/" + dlv, "#/events/" + evt, "#/log", "#/log?tab=events", "#/failing"} {
		do(t, ctx, "opening "+page, chromedp.Navigate(e.base+"/ui/"+page), chromedp.WaitVisible(shown(strings.Split(page[1:], "?")[0])))
		if w := eval[int](t, ctx, `Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)`); w > 390 {
			t.Errorf("%s is %d px wide at 390 px", page, w)
		}
		// Every control has a label, every column header its scope.
		if bare := eval[[]string](t, ctx, `[...document.querySelectorAll('input, select')].filter((i) =>
			!i.labels.length && !i.getAttribute('aria-label')).map((i) => i.id || i.outerHTML)
			.concat([...document.querySelectorAll('th:not([scope])')].map((th) => 'th ' + th.textContent))`); len(bare) > 0 {
			t.Errorf("%s: controls without a label or headers without scope: %v", page, bare)
		}
		// Tables are cards: each row a block, the header row out of sight.
		cards := eval[[]string](t, ctx, `[...document.querySelectorAll('main table')].filter((t) => t.offsetParent).map((t) =>
			getComputedStyle(t.querySelector('tbody tr')).display + ' ' + t.querySelector('thead').getBoundingClientRect().height)`)
		for _, c := range cards {
			if c != "grid 1" {
				t.Errorf("%s: a table row shows as %q at 390 px, want cards (grid rows, the header 1 px)", page, c)
			}
		}
	}
}

// The endpoint list makes at most three API requests for 50 endpoints,
// counted at a proxy in front of the node: health comes embedded, not one
// request a row.
func TestDashboardListRequests(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := start(t, true)
	for i := range 50 {
		e.subscribe(e.admin, fmt.Sprintf("http://127.0.0.1:9/endpoint-%02d", i), []string{"*"}, nil)
	}
	target, _ := url.Parse(e.base)
	var calls atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") || strings.HasPrefix(r.URL.Path, "/portal/") {
			calls.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	signInAs(t, ctx, front.URL, adminToken)
	calls.Store(0)
	do(t, ctx, "loading the list afresh", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("table.subs")))
	if n := eval[int](t, ctx, `document.querySelectorAll('table.subs tbody tr').length`); n != 50 {
		t.Fatalf("the list shows %d endpoints, want 50", n)
	}
	if n := calls.Load(); n > 3 {
		t.Errorf("the list made %d API requests for 50 endpoints, want at most 3", n)
	} else {
		t.Logf("the list made %d API request(s) for 50 endpoints", n)
	}
}

// Done when: someone who never saw hookd finds, from the list alone,
// which endpoint is broken and why, fixes its URL from the form, and sees
// the next delivery arrive; all in the browser, never the API.
func TestDashboardFixEndpointFromTheList(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := start(t, true)
	acme := e.tenantKey("acme")
	ok, fixed := testenv.NewReceiver(t), testenv.NewReceiver(t)
	e.subscribe(acme, ok.URL, []string{"order.*"}, nil)
	broken, _ := e.subscribe(acme, closedPort(t), []string{"order.*"}, nil)
	e.post(acme, "order.created", map[string]any{"n": 1})
	waitFailing(t, acme, broken)

	signInAs(t, ctx, e.base, acme.Token)
	first := eval[string](t, ctx, `document.querySelector('table.subs tbody tr').dataset.id`)
	row := text(t, ctx, `tr[data-id="`+broken+`"]`)
	if first != broken || !strings.Contains(row, "Failing") || !strings.Contains(row, "Connection refused") {
		t.Fatalf("the list's first row is %s, the broken one says %q; want it first, failing, connection refused", first, row)
	}
	do(t, ctx, "fixing its URL",
		chromedp.Click(chromedp.CSS(`tr[data-id="`+broken+`"] td.endpoint a`)),
		chromedp.WaitVisible(chromedp.CSS("#edit")),
		chromedp.Click(chromedp.CSS("#edit")),
		chromedp.WaitVisible(chromedp.CSS("#f-url")),
		chromedp.SetValue(chromedp.CSS("#f-url"), fixed.URL+"/hooks"),
		chromedp.Click(chromedp.CSS("#save")),
		chromedp.WaitVisible(chromedp.CSS("#banner")))
	testenv.Eventually(t, 20*time.Second, "the waiting delivery reaches the fixed URL", func() bool { return fixed.Count() >= 1 })
	testenv.Eventually(t, 20*time.Second, "the page to show it delivered", func() bool {
		if eval[int](t, ctx, `document.querySelectorAll('table.deliveries tr.delivered').length`) == 1 {
			return true
		}
		eval[bool](t, ctx, `(document.getElementById('refresh').click(), true)`)
		return false
	})
	e.post(acme, "order.created", map[string]any{"n": 2})
	testenv.Eventually(t, 10*time.Second, "the next event reaches the fixed URL", func() bool { return fixed.Count() == 2 })
	testenv.Eventually(t, 10*time.Second, "the banner to say healthy", func() bool {
		if strings.Contains(text(t, ctx, "#banner"), "Healthy") {
			return true
		}
		eval[bool](t, ctx, `(document.getElementById('refresh').click(), true)`)
		return false
	})
}

// An operator switches tenants (the header names the one shown), sees
// every tenant's failing endpoints in one place, and reads times in UTC
// on request.
func TestDashboardOperator(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := start(t, true)
	acme, globex := e.tenantKey("acme"), e.tenantKey("globex")
	slow := map[string]any{"retry_schedule": []string{"1h"}}
	a, _ := e.subscribe(acme, closedPort(t), []string{"*"}, slow)
	g, _ := e.subscribe(globex, closedPort(t), []string{"*"}, slow)
	e.post(acme, "order.created", map[string]any{})
	e.post(globex, "order.created", map[string]any{})
	waitFailing(t, acme, a)
	waitFailing(t, globex, g)

	signInAs(t, ctx, e.base, adminToken)
	do(t, ctx, "every failing endpoint", chromedp.Navigate(e.base+"/ui/#/failing"), chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+g+`"]`)))
	if page := text(t, ctx, "main"); !strings.Contains(page, "acme") || !strings.Contains(page, "globex") || !strings.Contains(page, "Connection refused") {
		t.Errorf("the failing view says %q, want both tenants' endpoints and why", page)
	}
	do(t, ctx, "switching to globex",
		chromedp.Navigate(e.base+"/ui/#/"),
		chromedp.WaitVisible(chromedp.CSS("#tenant-switch")),
		chromedp.SetValue(chromedp.CSS("#tenant-switch"), "globex"))
	eval[bool](t, ctx, `(document.getElementById('tenant-switch').dispatchEvent(new Event('change')), true)`)
	do(t, ctx, "globex's list", chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+g+`"]`)))
	if shown := eval[string](t, ctx, `document.getElementById('tenant-switch').value`); shown != "globex" {
		t.Errorf("the header names %q after switching to globex", shown)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('tr[data-id="`+a+`"]').length`); n != 0 {
		t.Errorf("acme's endpoint shows in globex's list")
	}
	do(t, ctx, "times in UTC", chromedp.Click(chromedp.CSS("#zone")), chromedp.WaitVisible(chromedp.CSS(`#zone[aria-pressed="true"]`)))
	testenv.Eventually(t, 10*time.Second, "times to read in UTC", func() bool {
		return strings.HasSuffix(eval[string](t, ctx, `document.querySelector('main time').title`), " UTC")
	})
}

// The event log: pages forward and back, filters by status code, finds an
// event by its idempotency key.
func TestDashboardEventLog(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := start(t, true)
	four := status(t, http.StatusBadRequest, "no")
	e.subscribe(e.admin, four.URL, []string{"order.*"}, nil)
	var events []string // oldest first
	for i := range 55 {
		events = append(events, e.admin.Must(http.StatusAccepted, "POST", "/v1/events",
			map[string]any{"type": "order.created", "payload": map[string]any{"i": i}, "idempotency_key": fmt.Sprintf("order-%d", i)})["id"].(string))
	}
	testenv.Eventually(t, 10*time.Second, "every delivery failed", func() bool { return four.Count() == 55 })
	rows := func() []string {
		return eval[[]string](t, ctx, `[...document.querySelectorAll('table.log tbody tr')].map((r) => r.dataset.id)`)
	}
	signInAs(t, ctx, e.base, adminToken)
	// Of one type: the 400s also make hookd tell the tenant (hookd.subscription.failing).
	do(t, ctx, "the events", chromedp.Navigate(e.base+"/ui/#/log?tab=events&event_type=order.created"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+events[54]+`"]`)))
	first := rows()
	if len(first) != 50 || first[0] != events[54] || first[49] != events[5] {
		t.Fatalf("the first page holds %d events from %v, want the 50 newest", len(first), first[:1])
	}
	do(t, ctx, "the next page", chromedp.Click(chromedp.CSS(`nav.pager a[href*="cursor="]`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+events[0]+`"]`)))
	if next := rows(); len(next) != 5 || next[0] != events[4] {
		t.Errorf("the second page holds %v, want the 5 oldest", next)
	}
	do(t, ctx, "back", chromedp.Click(chromedp.CSS(`nav.pager a`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+events[54]+`"]`)))
	if back := rows(); len(back) != 50 || back[0] != events[54] {
		t.Errorf("back on the first page: %d events from %v", len(back), back[:1])
	}
	do(t, ctx, "finding order-7",
		chromedp.SendKeys(chromedp.CSS("#lookup"), "order-7"),
		chromedp.Click(chromedp.CSS("#lookup-form button")),
		chromedp.WaitVisible(shown("/events/"+events[7])))
	do(t, ctx, "deliveries answered 400",
		chromedp.Navigate(e.base+"/ui/#/log"),
		chromedp.WaitVisible(chromedp.CSS("#lf-status")),
		chromedp.SendKeys(chromedp.CSS("#lf-status"), "400"),
		chromedp.Click(chromedp.CSS("#lf-apply")),
		chromedp.WaitVisible(chromedp.CSS(`nav.pager`)))
	answers := eval[[]string](t, ctx, `[...document.querySelectorAll('table.log tbody tr')].map((r) => r.textContent)`)
	if len(answers) != 50 {
		t.Errorf("%d deliveries answered 400 on the first page, want 50", len(answers))
	}
	for _, a := range answers {
		if !strings.Contains(a, "HTTP 400 Bad Request") {
			t.Errorf("a delivery listed under status 400 reads %q", a)
		}
	}
	do(t, ctx, "deliveries answered 500", chromedp.Navigate(e.base+"/ui/#/log?status=500"), chromedp.WaitVisible(chromedp.CSS("main .empty")))
}
