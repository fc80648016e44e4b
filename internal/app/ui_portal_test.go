package app

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"slices"
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

// The endpoint's charts draw what the stats API says, bucket by bucket:
// the last hour a minute each, 24 hours and 30 UTC days, pending included.
// The browser is in a zone west of UTC, where a UTC day's midnight is the
// evening before: the day chart still names the UTC date. Every series
// shows at 3:1 on white, and the time labels stay inside the chart.
func TestDashboardChartMatchesStats(t *testing.T) {
	t.Parallel()
	ctx := browser(t, chromedp.Env("TZ=Pacific/Honolulu"))
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	rc.Respond = func(n int, w http.ResponseWriter, _ *http.Request) {
		switch n % 3 {
		case 1:
			w.WriteHeader(http.StatusServiceUnavailable) // retried in an hour: pending
		case 2:
			w.WriteHeader(http.StatusBadRequest) // failed at once
		default:
			w.WriteHeader(http.StatusOK)
		}
	}
	sub, _ := e.subscribe(e.admin, rc.URL, []string{"*"}, map[string]any{"retry_schedule": []string{"1h"}})
	for i := range 9 {
		e.post(e.admin, "order.created", map[string]any{"n": i})
	}
	testenv.Eventually(t, 10*time.Second, "every delivery tried once", func() bool {
		h := e.admin.Must(http.StatusOK, "GET", "/v1/subscriptions/"+sub+"/health", nil)
		return rc.Count() == 9 && h["pending"] == float64(3) && h["failed"] == float64(3)
	})
	signInAs(t, ctx, e.base, adminToken)
	if off := eval[int](t, ctx, `new Date().getTimezoneOffset()`); off != 600 {
		t.Fatalf("the browser's zone is %d min behind UTC, want Honolulu's 600", off)
	}
	do(t, ctx, "opening the endpoint", chromedp.Navigate(e.base+"/ui/#/subscriptions/"+sub), chromedp.WaitVisible(chromedp.CSS("#chart-minute")))

	type bucket struct {
		Start, Label                        string
		Delivered, Failed, Skipped, Pending int
	}
	for _, g := range []string{"minute", "hour", "day"} {
		do(t, ctx, "drawing by "+g,
			chromedp.Click(chromedp.CSS("#chart-"+g)),
			chromedp.WaitReady(chromedp.CSS(`#history figure.chartbox[data-src*="granularity=`+g+`"]`)))
		src := eval[string](t, ctx, `document.querySelector('#history figure.chartbox').dataset.src`)
		api := e.admin.Must(http.StatusOK, "GET", src, nil)
		shown := eval[[]bucket](t, ctx, `[...document.querySelectorAll('#history table.chart-data tbody tr')].map((tr) => ({
			Start: tr.dataset.start, Label: tr.querySelector('td').textContent,
			Delivered: Number(tr.querySelector('td.delivered').textContent), Failed: Number(tr.querySelector('td.failed').textContent),
			Skipped: Number(tr.querySelector('td.skipped').textContent), Pending: Number(tr.querySelector('td.pending').textContent)}))`)
		data := api["data"].([]any)
		if want := map[string]int{"minute": 60, "hour": 24, "day": 30}[g]; len(data) != want || len(shown) != want {
			t.Fatalf("by %s the chart shows %d buckets, %s answers %d; want %d", g, len(shown), src, len(data), want)
		}
		var total bucket
		for i, d := range data {
			d := d.(map[string]any)
			num := func(k string) int { n, _ := d[k].(float64); return int(n) }
			want := bucket{d["start"].(string), shown[i].Label, num("delivered"), num("failed"), num("skipped"), num("pending")}
			if shown[i] != want {
				t.Errorf("by %s, bucket %d: the chart shows %+v, the API says %+v", g, i, shown[i], want)
			}
			if g == "day" && shown[i].Label != want.Start[5:10] {
				t.Errorf("the day of %s is labelled %q, want its UTC date %s", want.Start, shown[i].Label, want.Start[5:10])
			}
			total.Delivered, total.Failed, total.Pending = total.Delivered+want.Delivered, total.Failed+want.Failed, total.Pending+want.Pending
		}
		if total.Delivered != 3 || total.Failed != 3 || total.Pending != 3 {
			t.Errorf("by %s the stats count %+v, want 3 delivered, 3 failed, 3 pending", g, total)
		}
		// Labels: inside the drawing, the last one ending at its right edge at most.
		edges := eval[[]float64](t, ctx, `(() => { const svg = document.querySelector('#history svg.chart');
			const ts = [...svg.querySelectorAll('text.tick')].filter((x) => x.getAttribute('y') > 100);
			const a = ts[0].getBBox(), b = ts[ts.length - 1].getBBox();
			return [a.x, b.x + b.width, svg.viewBox.baseVal.width]; })()`)
		if edges[0] < 0 || edges[1] > edges[2]+0.5 {
			t.Errorf("by %s the time labels span %.1f to %.1f of a chart %.0f wide", g, edges[0], edges[1], edges[2])
		}
	}
	if first := eval[string](t, ctx, `document.querySelector('#history svg.chart text.tick.start').textContent`); first == "" {
		t.Error("the day chart has no first label")
	}

	// Each series' colour against the chart's white, at 3:1 for graphics.
	fills := eval[map[string]string](t, ctx, `Object.fromEntries(['delivered', 'failed', 'pending'].map((k) =>
		[k, getComputedStyle(document.querySelector('#history svg.chart rect.' + k)).fill]))`)
	fills["skipped"] = eval[string](t, ctx, `(() => { const r = document.createElementNS('http://www.w3.org/2000/svg', 'rect');
		r.setAttribute('class', 'skipped'); document.querySelector('#history svg.chart').append(r); return getComputedStyle(r).fill; })()`)
	for k, fill := range fills {
		if c := contrast(t, fill); c < 3 {
			t.Errorf("the %s colour %s is %.2f:1 on white, want at least 3:1", k, fill, c)
		}
	}
}

// contrast is the WCAG contrast ratio of an rgb(r, g, b) colour on white.
func contrast(t *testing.T, rgb string) float64 {
	t.Helper()
	var c [3]float64
	if _, err := fmt.Sscanf(rgb, "rgb(%g, %g, %g)", &c[0], &c[1], &c[2]); err != nil {
		t.Fatalf("colour %q: %v", rgb, err)
	}
	for i, v := range c {
		v /= 255
		if v <= 0.04045 {
			c[i] = v / 12.92
		} else {
			c[i] = math.Pow((v+0.055)/1.055, 2.4)
		}
	}
	l := 0.2126*c[0] + 0.7152*c[1] + 0.0722*c[2]
	return 1.05 / (l + 0.05)
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

	// In this order: the cut link first, while the session above is still
	// in the tab, which opening any link must forget.
	for _, c := range []struct{ name, url string }{
		{"a cut link", e.base + "/ui/#/portal/pt_%"},
		{"a second use", link},
		{"an old link", e.base + "/ui/#/portal/" + e.storeLink("acme", time.Now().Add(-time.Minute))},
		{"a wrong token", e.base + "/ui/#/portal/pt_guess"},
	} {
		name, url := c.name, c.url
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

	// Signing out ends the session on the server, not only in the tab.
	fresh := e.admin.Must(http.StatusCreated, "POST", "/v1/tenants/acme/portal-link", nil)["url"].(string)
	do(t, ctx, "opening a fresh link", chromedp.Navigate(fresh), chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+a1+`"]`)))
	session := eval[string](t, ctx, `sessionStorage.getItem('hookd.token') || ''`)
	do(t, ctx, "signing out", chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS("#token")))
	testenv.Eventually(t, 5*time.Second, "the signed-out session's key refused", func() bool {
		st, _ := (&testenv.Client{T: t, Base: e.base, Token: session}).Do("GET", "/v1/subscriptions", nil)
		return st == http.StatusUnauthorized
	})
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

// The endpoint list makes at most three API requests, counted at a proxy
// in front of the node, for a tenant of 55 endpoints: health comes
// embedded, every row's sparkline from one stats call, not one request a
// row. The failing endpoint is the last by ID, beyond the first page of
// 50, and still comes first, counted over the tenant.
func TestDashboardListRequests(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := start(t, true)
	for i := range 54 {
		e.subscribe(e.admin, fmt.Sprintf("http://127.0.0.1:9/endpoint-%02d", i), []string{"y.*"}, nil)
	}
	broken, _ := e.subscribe(e.admin, closedPort(t), []string{"x.*"}, map[string]any{"retry_schedule": []string{"1h"}})
	e.post(e.admin, "x.refused", map[string]any{})
	waitFailing(t, e.admin, broken)
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
	ids := e.admin.Must(http.StatusOK, "GET", "/v1/subscriptions?limit=50", nil)["data"].([]any)
	for _, s := range ids {
		if s.(map[string]any)["id"] == broken {
			t.Fatalf("the broken endpoint is on the first page by ID")
		}
	}
	signInAs(t, ctx, front.URL, adminToken)
	calls.Store(0)
	do(t, ctx, "loading the list afresh", chromedp.Reload(), chromedp.WaitVisible(shown("/")))
	if n := calls.Load(); n > 3 {
		t.Errorf("the list made %d API requests for 55 endpoints, want at most 3", n)
	} else {
		t.Logf("the list made %d API request(s) for 55 endpoints", n)
	}
	rows := eval[[]string](t, ctx, `[...document.querySelectorAll('table.subs tbody tr')].map((r) => r.dataset.id)`)
	if len(rows) != 51 || rows[0] != broken {
		t.Fatalf("the list shows %d endpoints, the first %v; want the page's 50 and the failing one first", len(rows), rows[:1])
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('table.subs tbody tr .spark').length`); n != 51 {
		t.Errorf("%d of 51 rows have a sparkline", n)
	}
	if sum := text(t, ctx, "#summary"); !strings.HasPrefix(sum, "1 endpoint failing") {
		t.Errorf("the summary says %q, want the one failing endpoint counted", sum)
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
	// Retried every 2 s for half a minute: a waiting delivery keeps its
	// retry time when the URL is fixed, and on a loaded machine the
	// default's second try (5 s) can come before the fix, its third a
	// minute later. 16 tries stay under the breaker's volume of 20.
	every2s := slices.Repeat([]string{"2s"}, 15)
	broken, _ := e.subscribe(acme, closedPort(t), []string{"order.*"}, map[string]any{"retry_schedule": every2s})
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
		// Read in one step: a refresh may redraw the banner between a query and a read.
		if strings.Contains(eval[string](t, ctx, `(document.getElementById('banner') || {}).textContent || ''`), "Healthy") {
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
	// The list before the switch may still be on screen for a moment (on a
	// loaded machine the change's request is slower than the wait above).
	testenv.Eventually(t, 10*time.Second, "globex's list without acme's endpoint", func() bool {
		return eval[int](t, ctx, `document.querySelectorAll('tr[data-id="`+a+`"]').length`) == 0 &&
			eval[int](t, ctx, `document.querySelectorAll('tr[data-id="`+g+`"]').length`) == 1
	})
	// A tenant created since sign-in shows once the switcher is opened.
	options := func() []string {
		return eval[[]string](t, ctx, `[...document.querySelectorAll('#tenant-switch option')].map((o) => o.value)`)
	}
	e.tenantKey("initech")
	if slices.Contains(options(), "initech") {
		t.Fatalf("the switcher lists initech before it was opened: %v", options())
	}
	do(t, ctx, "opening the switcher", chromedp.Focus(chromedp.CSS("#tenant-switch")))
	testenv.Eventually(t, 10*time.Second, "the new tenant in the switcher", func() bool { return slices.Contains(options(), "initech") })
	if shown := eval[string](t, ctx, `document.getElementById('tenant-switch').value`); shown != "globex" {
		t.Errorf("after the switcher's refresh it names %q, want globex still", shown)
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
	for i := range 105 {
		events = append(events, e.admin.Must(http.StatusAccepted, "POST", "/v1/events",
			map[string]any{"type": "order.created", "payload": map[string]any{"i": i}, "idempotency_key": fmt.Sprintf("order-%d", i)})["id"].(string))
	}
	testenv.Eventually(t, 20*time.Second, "every delivery failed", func() bool { return four.Count() == 105 })
	rows := func() []string {
		return eval[[]string](t, ctx, `[...document.querySelectorAll('table.log tbody tr')].map((r) => r.dataset.id)`)
	}
	// page checks the rows from newest to oldest and what the pager says.
	page := func(what string, newest, oldest int, pager string) {
		t.Helper()
		got := rows()
		if len(got) != newest-oldest+1 || got[0] != events[newest] || got[len(got)-1] != events[oldest] {
			t.Errorf("%s holds %d events, want events %d down to %d", what, len(got), newest, oldest)
		}
		if p := text(t, ctx, "nav.pager"); !strings.Contains(p, pager) {
			t.Errorf("on %s the pager says %q, want %q", what, p, pager)
		}
	}
	signInAs(t, ctx, e.base, adminToken)
	// Of one type: the 400s also make hookd tell the tenant (hookd.subscription.failing).
	do(t, ctx, "the events", chromedp.Navigate(e.base+"/ui/#/log?tab=events&event_type=order.created"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+events[104]+`"]`)))
	page("the first page", 104, 55, "page 1")
	next := chromedp.CSS(`nav.pager a[href*="cursor="]:last-child`)
	do(t, ctx, "the next page", chromedp.Click(next), chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+events[54]+`"]`)))
	page("the second page", 54, 5, "page 2")
	do(t, ctx, "the last page", chromedp.Click(next), chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+events[0]+`"]`)))
	page("the last page", 4, 0, "page 3")
	// After a reload the way back is still there, page by page: it is in the address.
	do(t, ctx, "reloading, then back", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+events[0]+`"]`)),
		chromedp.Click(chromedp.CSS(`nav.pager a`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+events[54]+`"]`)))
	page("the second page again", 54, 5, "page 2")
	do(t, ctx, "back again", chromedp.Click(chromedp.CSS(`nav.pager a`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+events[104]+`"]`)))
	page("the first page again", 104, 55, "page 1")
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

// Every status has its own words and colour, in the list (in order, each
// with why) and in the endpoint's banner: failing; disabled; held (behind
// its host's open circuit, never tried itself, saying until when); shed
// (a backlog over the limit that does not shrink); no matching events (a
// pattern with a typo, with the hint); paused. The sparklines come from
// the stats API.
func TestDashboardStatuses(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := shedding(t, 300*time.Millisecond)
	health := func(id string) map[string]any {
		return e.admin.Must(http.StatusOK, "GET", "/v1/subscriptions/"+id+"/health", nil)
	}
	// X's refused connections open its host's circuit; Y on the same host waits behind it.
	dead := closedPort(t)
	x, _ := e.subscribe(e.admin, dead, []string{"x.*"}, map[string]any{"retry_schedule": []string{}})
	y, _ := e.subscribe(e.admin, dead+"/y", []string{"y.*"}, nil)
	for i := range 25 {
		e.post(e.admin, "x.refused", map[string]any{"i": i})
	}
	testenv.Eventually(t, 10*time.Second, "the host's circuit to open", func() bool { return health(x)["host_circuit"] == "open" })
	e.post(e.admin, "y.waiting", map[string]any{})
	// Z answers 500, retried in an hour: its backlog grows and is shed.
	z, _ := e.subscribe(e.admin, status(t, http.StatusInternalServerError, "down").URL, []string{"z.*"}, map[string]any{"retry_schedule": []string{"1h"}})
	for i := range 7 {
		e.post(e.admin, "z.backlog", map[string]any{"i": i})
	}
	paused, _ := e.subscribe(e.admin, "http://127.0.0.1:9/paused", []string{"p.*"}, nil)
	e.admin.Must(http.StatusOK, "PATCH", "/v1/subscriptions/"+paused, map[string]any{"state": "paused"})
	disabled, _ := e.subscribe(e.admin, "http://127.0.0.1:9/disabled", []string{"d.*"}, nil)
	e.admin.Must(http.StatusOK, "PATCH", "/v1/subscriptions/"+disabled, map[string]any{"state": "disabled"})
	typo, _ := e.subscribe(e.admin, "http://127.0.0.1:9/typo", []string{"z.bakclog"}, nil)
	testenv.Eventually(t, 10*time.Second, "Y held, Z shed", func() bool {
		hy := health(y)
		return hy["status"] == "held" && hy["held_by"] == "host_circuit" && hy["held_until"] != nil && health(z)["status"] == "shed"
	})

	signInAs(t, ctx, e.base, adminToken)
	do(t, ctx, "reading the list", chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+typo+`"]`)))
	heldUntil := eval[string](t, ctx, `clock(new Date('`+health(y)["held_until"].(string)+`'))`)
	order := eval[[]string](t, ctx, `[...document.querySelectorAll('table.subs tbody tr')].map((r) => r.dataset.status)`)
	if got := strings.Join(order, " "); got != "failing disabled held shed unmatched paused" {
		t.Errorf("the list's statuses in order: %s", got)
	}
	want := map[string][]string{
		x:        {"Failing", "Connection refused"},
		disabled: {"Disabled", "disabled by request"},
		y:        {"Held back", "its host cannot be reached", "until about " + heldUntil},
		z:        {"Shedding", "backlog over the limit and not shrinking"},
		typo:     {"No matching events", "None of the 3 event types this tenant has sent (x.refused, y.waiting, z.backlog) matches z.bakclog"},
		paused:   {"Paused", "nothing is sent until you resume"},
	}
	for id, words := range want {
		row := text(t, ctx, `tr[data-id="`+id+`"]`)
		for _, w := range words {
			if !strings.Contains(row, w) {
				t.Errorf("the row of %s says %q, want %q", id, row, w)
			}
		}
	}
	// Colours: red for failing and disabled, amber for held, shed and unmatched, grey for paused.
	colours := eval[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll('table.subs tbody tr')].map((r) =>
		[r.dataset.status, getComputedStyle(r.querySelector('.badge')).backgroundColor]))`)
	bad, warn, idle := "rgb(248, 220, 217)", "rgb(251, 239, 213)", "rgb(230, 233, 236)"
	for st, c := range map[string]string{"failing": bad, "disabled": bad, "held": warn, "shed": warn, "unmatched": warn, "paused": idle} {
		if colours[st] != c {
			t.Errorf("the %s badge is %s, want %s", st, colours[st], c)
		}
	}
	// The sparklines are the stats API's: X's 25 (20 failed, then held by
	// its own circuit), Y's one waiting.
	sparks := eval[map[string][]int](t, ctx, `Object.fromEntries([...document.querySelectorAll('table.subs tbody tr .spark')].map((s) =>
		[s.closest('tr').dataset.id, [Number(s.dataset.failed), Number(s.dataset.pending)]]))`)
	if fx, fy := sparks[x], sparks[y]; len(fx) != 2 || fx[0] < 20 || fx[0]+fx[1] != 25 || fmt.Sprint(fy) != "[0 1]" {
		t.Errorf("sparklines [failed pending]: X %v, Y %v; want X's 25 (at least 20 failed), Y's 1 pending", fx, fy)
	}

	banners := map[string][]string{
		y:        {"Held back: its host cannot be reached", "until about " + heldUntil, "1 waiting"},
		z:        {"Shedding since", "new deliveries are skipped"},
		typo:     {"No matching events: none of the types this tenant sends matches z.bakclog"},
		paused:   {"Paused: nothing is sent until you resume"},
		disabled: {"Disabled: disabled by request"},
	}
	for id, words := range banners {
		do(t, ctx, "opening "+id, chromedp.Navigate(e.base+"/ui/#/subscriptions/"+id), chromedp.WaitVisible(shown("/subscriptions/"+id)))
		b := text(t, ctx, "#banner")
		for _, w := range words {
			if !strings.Contains(b, w) {
				t.Errorf("the banner of %s says %q, want %q", id, b, w)
			}
		}
	}
	do(t, ctx, "opening the typo", chromedp.Navigate(e.base+"/ui/#/subscriptions/"+typo), chromedp.WaitVisible(chromedp.CSS("#no-match")))
	if hint := text(t, ctx, "#no-match"); !strings.Contains(hint, "matches z.bakclog: nothing is delivered here") {
		t.Errorf("the typo's hint says %q", hint)
	}
	if cls := eval[string](t, ctx, `document.getElementById('banner').className`); !strings.Contains(cls, "st-unmatched") {
		t.Errorf("the typo's banner is %q, want the warning colour (st-unmatched)", cls)
	}
}

// The form offers the types the tenant has sent as checkboxes (hookd's own
// left out) and saves the rate limit and a header, whose value reaches the
// endpoint but is never shown back; Delete asks first: cancel keeps the
// endpoint, confirm deletes it from the store.
func TestDashboardFormAndDelete(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	e.post(e.admin, "order.created", map[string]any{})
	e.post(e.admin, "invoice.paid", map[string]any{})
	const credential = "s3cret-header-value"
	signInAs(t, ctx, e.base, adminToken)
	do(t, ctx, "the form", chromedp.Navigate(e.base+"/ui/#/new"), chromedp.WaitVisible(chromedp.CSS("#f-url")))
	boxes := eval[[]string](t, ctx, `[...document.querySelectorAll('#endpoint-form .checks input[type=checkbox]')].map((c) => c.value)`)
	if strings.Join(boxes, " ") != "invoice.paid order.created *" {
		t.Errorf("the form's event-type checkboxes: %v, want the two types sent and every event", boxes)
	}
	do(t, ctx, "filling it in",
		chromedp.SendKeys(chromedp.CSS("#f-url"), rc.URL+"/hooks"),
		chromedp.Click(chromedp.CSS(`#endpoint-form input[value="invoice.paid"]`)),
		chromedp.SetValue(chromedp.CSS("#f-rate"), "5"),
		chromedp.SendKeys(chromedp.CSS("#h-name-0"), "X-Token"),
		chromedp.SendKeys(chromedp.CSS("#h-value-0"), credential),
		chromedp.Click(chromedp.CSS("#save")),
		chromedp.WaitVisible(chromedp.CSS("#secret")))
	subs := e.admin.Must(http.StatusOK, "GET", "/v1/subscriptions", nil)["data"].([]any)
	if len(subs) != 1 {
		t.Fatalf("%d subscriptions after the form, want 1", len(subs))
	}
	s := subs[0].(map[string]any)
	id := s["id"].(string)
	if fmt.Sprint(s["event_types"]) != "[invoice.paid]" || s["rate_limit"] != float64(5) || fmt.Sprint(s["headers"]) != "map[X-Token:[redacted]]" {
		t.Errorf("saved: event types %v, rate limit %v, headers %v; want [invoice.paid], 5, X-Token", s["event_types"], s["rate_limit"], s["headers"])
	}
	e.post(e.admin, "invoice.paid", map[string]any{})
	testenv.Eventually(t, 10*time.Second, "the delivery arrives", func() bool { return rc.Count() == 1 })
	if got := rc.Requests()[0].Header.Get("X-Token"); got != credential {
		t.Errorf("the endpoint got X-Token %q, want the value typed in the form", got)
	}

	// Edit shows what is set, the header by name only.
	do(t, ctx, "editing it", chromedp.Navigate(e.base+"/ui/#/subscriptions/"+id+"/edit"), chromedp.WaitVisible(shown("/subscriptions/"+id+"/edit")))
	checked := eval[[]string](t, ctx, `[...document.querySelectorAll('#endpoint-form input[type=checkbox]:checked')].map((c) => c.value)`)
	rate := eval[string](t, ctx, `document.getElementById('f-rate').value`)
	values := eval[string](t, ctx, `[...document.querySelectorAll('input')].map((i) => i.value).join(' ') + document.body.innerText`)
	if fmt.Sprint(checked) != "[invoice.paid]" || rate != "5" || !strings.Contains(text(t, ctx, "#endpoint-form"), "Now: X-Token") {
		t.Errorf("the edit form: checked %v, rate %q, says %q", checked, rate, text(t, ctx, "#endpoint-form"))
	}
	do(t, ctx, "the endpoint's page", chromedp.Navigate(e.base+"/ui/#/subscriptions/"+id), chromedp.WaitVisible(shown("/subscriptions/"+id)))
	values += eval[string](t, ctx, `document.body.innerText`)
	if strings.Contains(values, credential) {
		t.Error("the header's value is shown back")
	}

	exists := func() int {
		st, _ := e.admin.Do("GET", "/v1/subscriptions/"+id, nil)
		return st
	}
	do(t, ctx, "asking to delete, then cancelling",
		chromedp.Click(chromedp.CSS("#delete")), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	if ask := text(t, ctx, ".confirm"); !strings.Contains(ask, "Delete this endpoint?") {
		t.Errorf("the delete confirmation says %q", ask)
	}
	do(t, ctx, "cancelling", chromedp.Click(chromedp.CSS("#cancel")), chromedp.WaitNotPresent(chromedp.CSS(".confirm")))
	if st := exists(); st != http.StatusOK {
		t.Fatalf("after cancelling the delete the subscription answers %d, want 200", st)
	}
	do(t, ctx, "deleting",
		chromedp.Click(chromedp.CSS("#delete")), chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(shown("/")))
	if st := exists(); st != http.StatusNotFound {
		t.Errorf("after confirming the delete the subscription answers %d, want 404", st)
	}
	if msg := text(t, ctx, "#flash"); !strings.Contains(msg, "Deleted "+rc.URL+"/hooks") {
		t.Errorf("after deleting the page says %q", msg)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('tr[data-id="`+id+`"]').length`); n != 0 {
		t.Error("the deleted endpoint is still listed")
	}
}

// The event log filters deliveries by state and by time range (to the
// second, in the browser's zone), and keeps itself fresh: it says how old
// what it shows is, and a new delivery appears without a reload.
func TestDashboardLogFiltersAndRefresh(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := start(t, true)
	ok, four := testenv.NewReceiver(t), status(t, http.StatusBadRequest, "no")
	okSub, _ := e.subscribe(e.admin, ok.URL, []string{"*"}, nil)
	badSub, _ := e.subscribe(e.admin, four.URL, []string{"order.*"}, nil)
	// deliveries of an event, by subscription, and when it was created.
	deliveries := func(evt string) (map[string]string, time.Time) {
		out := e.admin.Must(http.StatusOK, "GET", "/v1/events/"+evt, nil)
		ids := map[string]string{}
		for _, d := range out["deliveries"].([]any) {
			d := d.(map[string]any)
			ids[d["subscription_id"].(string)] = d["id"].(string)
		}
		at, _ := time.Parse(time.RFC3339Nano, out["created_at"].(string))
		return ids, at
	}
	first, firstAt := deliveries(e.post(e.admin, "order.created", map[string]any{}))
	testenv.Eventually(t, 5*time.Second, "the clock past the first event's second", func() bool {
		return time.Now().Truncate(time.Second).After(firstAt)
	})
	second, secondAt := deliveries(e.post(e.admin, "invoice.sent", map[string]any{}))
	testenv.Eventually(t, 10*time.Second, "every delivery done", func() bool { return ok.Count() == 2 && four.Count() == 1 })
	e.waitDelivery(first[badSub], "failed", 10*time.Second)

	rows := func() string {
		ids := eval[[]string](t, ctx, `[...document.querySelectorAll('table.log tbody tr')].map((r) => r.dataset.id)`)
		return strings.Join(sorted(ids...), " ")
	}
	signInAs(t, ctx, e.base, adminToken)
	do(t, ctx, "failed deliveries",
		chromedp.Navigate(e.base+"/ui/#/log"), chromedp.WaitVisible(chromedp.CSS("#lf-state")),
		chromedp.SetValue(chromedp.CSS("#lf-state"), "failed"), chromedp.Click(chromedp.CSS("#lf-apply")))
	// The unfiltered page shows the failed row too: wait for the filter's answer.
	testenv.Eventually(t, 10*time.Second, "only the failed delivery listed", func() bool { return rows() == first[badSub] })
	// since and until from the second event's second: the first is before it.
	at := "inputValue(new Date('" + secondAt.Format(time.RFC3339Nano) + "'))"
	for _, c := range []struct {
		since, until string
		want         []string
	}{
		{at, "''", []string{second[okSub]}},
		{"''", at, []string{first[okSub], first[badSub]}},
	} {
		eval[bool](t, ctx, `(document.getElementById('lf-state').value = '', document.getElementById('lf-since').value = `+c.since+`,
			document.getElementById('lf-until').value = `+c.until+`, document.getElementById('lf-apply').click(), true)`)
		want := strings.Join(sorted(c.want...), " ")
		testenv.Eventually(t, 10*time.Second, "deliveries from "+c.since+" until "+c.until, func() bool { return rows() == want })
	}

	// Auto-refresh: the age of the page counts up, and a new delivery
	// appears in the same page (a marker set in it survives).
	do(t, ctx, "the whole log", chromedp.Navigate(e.base+"/ui/#/log"), chromedp.WaitVisible(shown("/log")))
	eval[bool](t, ctx, `(window.marker = 'same page', document.activeElement.blur(), true)`)
	testenv.Eventually(t, 5*time.Second, "the page to say how old it is", func() bool {
		u := eval[string](t, ctx, `(document.getElementById('updated') || {}).textContent || ''`)
		return strings.HasPrefix(u, "Updated ") && strings.HasSuffix(u, " s ago") && u != "Updated 0 s ago"
	})
	third, _ := deliveries(e.post(e.admin, "invoice.sent", map[string]any{}))
	testenv.Eventually(t, 20*time.Second, "the new delivery to appear", func() bool {
		return eval[int](t, ctx, `document.querySelectorAll('tr[data-id="`+third[okSub]+`"]').length`) == 1
	})
	if m := eval[string](t, ctx, `window.marker || ''`); m != "same page" {
		t.Error("the page was reloaded to show the new delivery")
	}
}

// A delivery's page shows what hookd sent (its headers, the signature cut
// short and the endpoint's credential redacted, and the body) and, per
// attempt, what came back (status, headers, body), and marks a replay and
// the attempts after it.
func TestDashboardDeliveryPage(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := start(t, true)
	rc, dlv := e.failedOnce(t)
	sent := rc.Requests()[0]

	signInAs(t, ctx, e.base, adminToken)
	do(t, ctx, "opening the delivery", chromedp.Navigate(e.base+"/ui/#/deliveries/"+dlv), chromedp.WaitVisible(chromedp.CSS("#request-headers")))
	headers := text(t, ctx, "#request-headers")
	sig := sent.Header.Get("webhook-signature")
	for _, w := range []string{"webhook-id: " + sent.Header.Get("webhook-id"), "webhook-signature: " + sig[:11] + "…", "X-Api-Key: [redacted]"} {
		if !strings.Contains(headers, w) {
			t.Errorf("the request's headers read %q, want %q", headers, w)
		}
	}
	if strings.Contains(headers, sig) || strings.Contains(eval[string](t, ctx, `document.body.innerText`), credential) {
		t.Errorf("the page shows the whole signature or the credential: %q", headers)
	}
	var shownBody, sentBody any
	if err := json.Unmarshal([]byte(text(t, ctx, "#request-body")), &shownBody); err != nil {
		t.Fatalf("the body shown is not the JSON sent: %v", err)
	}
	json.Unmarshal(sent.Body, &sentBody)
	if !reflect.DeepEqual(shownBody, sentBody) {
		t.Errorf("the body shown %v, the endpoint got %s", shownBody, sent.Body)
	}
	answer := text(t, ctx, `.attempt[data-n="1"]`)
	for _, w := range []string{"HTTP 400 Bad Request", "X-Why: busy", "try later"} {
		if !strings.Contains(answer, w) {
			t.Errorf("attempt 1 reads %q, want %q", answer, w)
		}
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('.badge.replay').length`); n != 0 {
		t.Errorf("%d replay marks before any replay", n)
	}

	do(t, ctx, "replaying", chromedp.Click(chromedp.CSS("#replay-delivery")), chromedp.WaitVisible(chromedp.CSS("#flash.info")))
	e.waitDelivery(dlv, "delivered", 10*time.Second)
	do(t, ctx, "reading it again", chromedp.Navigate(e.base+"/ui/#/"), chromedp.WaitVisible(shown("/")),
		chromedp.Navigate(e.base+"/ui/#/deliveries/"+dlv), chromedp.WaitVisible(chromedp.CSS(`.attempt[data-n="2"]`)))
	state := eval[string](t, ctx, `[...document.querySelectorAll('main dt')].find((dt) => dt.textContent === 'State').nextElementSibling.textContent`)
	marks := eval[[]string](t, ctx, `[...document.querySelectorAll('.attempt')].map((a) => a.dataset.n + ':' + a.querySelectorAll('.badge.replay').length)`)
	if !strings.Contains(state, "delivered") || !strings.Contains(state, "replayed") {
		t.Errorf("the state reads %q, want delivered and marked replayed", state)
	}
	if fmt.Sprint(marks) != "[1:0 2:1]" {
		t.Errorf("replay marks by attempt %v, want only attempt 2 marked after the replay", marks)
	}
	// A success's answer is not kept (serve --keep-success-response), and
	// the page says so rather than show an empty body.
	if a2 := text(t, ctx, `.attempt[data-n="2"]`); !strings.Contains(a2, "HTTP 204 No Content") || !strings.Contains(a2, "after the replay") ||
		!strings.Contains(a2, "not kept for a success") {
		t.Errorf("attempt 2 reads %q", a2)
	}
}
