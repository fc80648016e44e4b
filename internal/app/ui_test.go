package app

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"hookd/internal/testenv"
)

// browser starts a headless Chromium for one test, with extra options
// (e.g. its time zone). Without one the test skips, unless
// HOOKD_TEST_BROWSER=required (CI installs Chromium and sets it, so a
// missing install fails there instead of passing silently).
func browser(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path := os.Getenv("HOOKD_TEST_CHROMIUM")
	if path == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				path = p
				break
			}
		}
	}
	if path == "" {
		if os.Getenv("HOOKD_TEST_BROWSER") == "required" {
			t.Fatal("HOOKD_TEST_BROWSER=required but no chromium found (apt install chromium, or set HOOKD_TEST_CHROMIUM)")
		}
		t.Skip("no chromium found: browser tests skipped (apt install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true),
	)
	opts = append(opts, extra...)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	ctx, cancelRun := context.WithTimeout(ctx, 2*time.Minute) // bounds the whole browser
	t.Cleanup(func() { cancelRun(); cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts it
		t.Fatalf("starting %s: %v", path, err)
	}
	watchPage(t, ctx)
	return ctx
}

// watchPage fails the test, when it ends, on anything the page reported
// that it should not: an uncaught exception, or a Content-Security-Policy
// violation (the policy would have blocked the dashboard's own code).
// Failed requests are not problems: tests ask for 401s and 404s.
func watchPage(t *testing.T, ctx context.Context) {
	var mu sync.Mutex
	var problems []string
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || strings.Contains(m.Text, "Content Security Policy") {
				mu.Lock()
				problems = append(problems, m.String())
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range problems {
			t.Errorf("the page reported: %s", p)
		}
	})
}

// do runs browser steps, failing the test with what was being done.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	// A step's own bound, so a failure still leaves time to read the page.
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		page, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
		t.Fatalf("%s: %v; the page says: %q", what, err, page)
	}
}

// read runs one browser action that answers a value.
func read[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// text reads the visible text of the first element css matches, in one
// evaluation: a page that re-renders (auto-refresh) may replace the node
// between a query and a read, which chromedp.Text reports as a failure.
func text(t *testing.T, ctx context.Context, css string) string {
	t.Helper()
	sel, _ := json.Marshal(css)
	js := `(() => { const n = document.querySelector(` + string(sel) + `); return n ? n.innerText : null })()`
	var got *string
	testenv.Eventually(t, 10*time.Second, "an element matching "+css, func() bool {
		got = read(t, ctx, chromedp.Evaluate[*string](js))
		return got != nil
	})
	return *got
}

// The dashboard, driven in a real browser against a real node: it shows
// what the store holds, and its buttons change it. Data that looks like
// HTML (a payload, an endpoint's answer) is shown as text, never run.
func TestDashboard(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := start(t, true)

	ok := testenv.NewReceiver(t)
	const hostile = `<img src=x onerror="document.title='pwned'">bad signature`
	bad := testenv.NewReceiver(t)
	bad.Respond = func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 0 {
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(hostile))
			return
		}
		w.WriteHeader(http.StatusOK)
	}
	okSub, _ := e.subscribe(e.admin, ok.URL, []string{"order.*"}, nil)
	badSub, _ := e.subscribe(e.admin, bad.URL, []string{"order.*"}, nil)
	evt := e.post(e.admin, "order.created", map[string]any{"note": "<script>document.title='pwned'</script>"})
	var badDelivery string
	for _, d := range e.admin.Must(200, "GET", "/v1/events/"+evt, nil)["deliveries"].([]any) {
		if d := d.(map[string]any); d["subscription_id"] == badSub {
			badDelivery = d["id"].(string)
		}
	}
	e.waitDelivery(badDelivery, "failed", 10*time.Second)
	testenv.Eventually(t, 10*time.Second, "the healthy endpoint gets the event", func() bool { return ok.Count() == 1 })

	// A wrong token is refused and nothing else is shown.
	var flashText string
	do(t, ctx, "signing in with a wrong token",
		chromedp.Navigate(e.base+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), "not-a-token"),
		chromedp.Click(chromedp.CSS(`#signin button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#flash")))
	flashText = text(t, ctx, "#flash")
	if !strings.Contains(flashText, "refused") {
		t.Errorf("flash after a wrong token = %q, want it to say the token was refused", flashText)
	}

	// Signed in: both subscriptions, with the failed delivery counted.
	var badRow, okRow, failed string
	do(t, ctx, "signing in and reading the subscriptions",
		chromedp.SetValue(chromedp.CSS("#token"), adminToken),
		chromedp.Click(chromedp.CSS(`#signin button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+badSub+`"]`)))
	badRow, okRow = text(t, ctx, `tr[data-id="`+badSub+`"]`), text(t, ctx, `tr[data-id="`+okSub+`"]`)
	failed = text(t, ctx, `tr[data-id="`+badSub+`"] .failed-count`)
	if !strings.Contains(badRow, bad.URL) || !strings.Contains(okRow, ok.URL) {
		t.Errorf("subscription rows %q and %q do not name their endpoints %s and %s", badRow, okRow, bad.URL, ok.URL)
	}
	if strings.TrimSpace(failed) != "1" {
		t.Errorf("failed count for the rejecting endpoint = %q, want 1", failed)
	}

	// Subscription → its failed delivery → the attempt, answer shown as text.
	var response, title string
	var images int
	do(t, ctx, "opening the failed delivery",
		chromedp.Click(chromedp.CSS(`tr[data-id="`+badSub+`"] a`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+badDelivery+`"]`)),
		chromedp.Click(chromedp.CSS(`tr[data-id="`+badDelivery+`"] a`)),
		chromedp.WaitVisible(chromedp.CSS("pre.response")))
	response, title = text(t, ctx, "pre.response"), read(t, ctx, chromedp.Title())
	images = read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('main img').length`))
	if response != hostile {
		t.Errorf("response shown = %q, want the endpoint's answer as text %q", response, hostile)
	}
	if title != "hookd" || images != 0 {
		t.Errorf("the endpoint's answer was rendered as HTML: title %q, %d images", title, images)
	}

	// Replay: the endpoint, now fixed, gets the same event again.
	do(t, ctx, "replaying the delivery",
		chromedp.Click(chromedp.CSS("#replay-delivery")),
		chromedp.WaitVisible(chromedp.CSS("#flash.info")))
	testenv.Eventually(t, 10*time.Second, "the replay reaches the endpoint", func() bool { return bad.Count() == 2 })
	if got := bad.Requests()[1].Header.Get("webhook-id"); got != evt {
		t.Errorf("replay's webhook-id = %q, want the event's %q", got, evt)
	}
	e.waitDelivery(badDelivery, "delivered", 10*time.Second)

	// The event page shows the payload as text.
	var payload string
	do(t, ctx, "opening the event",
		chromedp.Navigate(e.base+"/ui/#/events/"+evt),
		chromedp.WaitVisible(chromedp.CSS("pre.payload")))
	payload, title = text(t, ctx, "pre.payload"), read(t, ctx, chromedp.Title())
	if !strings.Contains(payload, "<script>document.title='pwned'</script>") || title != "hookd" {
		t.Errorf("payload shown = %q (title %q), want the script tag as text", payload, title)
	}

	// Pause asks once, then changes the store; resume changes it back.
	do(t, ctx, "asking to pause",
		chromedp.Navigate(e.base+"/ui/#/subscriptions/"+okSub),
		chromedp.Click(chromedp.CSS("#pause")),
		chromedp.WaitVisible(chromedp.CSS("#confirm")))
	if s := e.admin.Must(200, "GET", "/v1/subscriptions/"+okSub, nil)["state"]; s != "active" {
		t.Errorf("before confirming, the subscription is %v, want active", s)
	}
	do(t, ctx, "pausing",
		chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS("#resume")))
	if s := e.admin.Must(200, "GET", "/v1/subscriptions/"+okSub, nil)["state"]; s != "paused" {
		t.Errorf("after Pause the subscription is %v, want paused", s)
	}
	do(t, ctx, "resuming",
		chromedp.Click(chromedp.CSS("#resume")),
		chromedp.WaitVisible(chromedp.CSS("#pause")))
	if s := e.admin.Must(200, "GET", "/v1/subscriptions/"+okSub, nil)["state"]; s != "active" {
		t.Errorf("after Resume the subscription is %v, want active", s)
	}

	// Signing out forgets the token.
	var token string
	do(t, ctx, "signing out",
		chromedp.Click(chromedp.CSS("#signout")),
		chromedp.WaitVisible(chromedp.CSS("#token")))
	token = read(t, ctx, chromedp.Evaluate[string](`sessionStorage.getItem('hookd.token') || ''`))
	if token != "" {
		t.Errorf("token still stored after signing out: %q", token)
	}
}

// A tenant key sees its own subscriptions only, in the dashboard as in the API.
func TestDashboardTenantSeesOwnOnly(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := start(t, true)
	tenant := e.admin.Must(http.StatusCreated, "POST", "/v1/tenants", map[string]any{"id": "acme"})
	key := tenant["api_key"].(string)
	mine, _ := e.subscribe(e.admin, "http://127.0.0.1:9/mine", []string{"*"}, map[string]any{"tenant_id": "acme"})
	other, _ := e.subscribe(e.admin, "http://127.0.0.1:9/other", []string{"*"}, nil)

	var rows int
	var otherPage string
	do(t, ctx, "signing in as the tenant",
		chromedp.Navigate(e.base+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), key),
		chromedp.Click(chromedp.CSS(`#signin button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+mine+`"]`)))
	rows = read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('tbody tr').length`))
	do(t, ctx, "opening another tenant's subscription",
		chromedp.Navigate(e.base+"/ui/#/subscriptions/"+other),
		chromedp.WaitVisible(chromedp.CSS("main p.error")))
	otherPage = text(t, ctx, "main")
	if rows != 1 {
		t.Errorf("the tenant's list has %d rows, want its one subscription", rows)
	}
	if !strings.Contains(otherPage, "Not found") || strings.Contains(otherPage, "/other") {
		t.Errorf("another tenant's subscription page shows %q, want Not found and nothing of it", otherPage)
	}
}
