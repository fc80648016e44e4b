// Package sdktest runs Svix's official Go SDK against a running hookd:
// the flow docs/svix.md promises. hookd's own suite starts hookd and runs
// this module (internal/app/svix_sdk_test.go); it is a module of its own
// so the SDK never enters hookd's go.mod or binary.
package sdktest

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	svix "github.com/svix/svix-webhooks/go"
	"github.com/svix/svix-webhooks/go/models"
)

// receiver is a loopback endpoint answering status, recording each request.
type receiver struct {
	url    string
	mu     sync.Mutex
	status int
	got    []delivery
}

type delivery struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{status: http.StatusOK}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, delivery{r.Header.Clone(), b})
		status := rc.status
		rc.mu.Unlock()
		w.WriteHeader(status)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	rc.url = "http://" + ln.Addr().String() + "/hook"
	return rc
}

func (rc *receiver) answer(status int) {
	rc.mu.Lock()
	rc.status = status
	rc.mu.Unlock()
}

// wait returns the deliveries whose body holds marker, polling until
// there are at least n of them or the deadline passes.
func (rc *receiver) wait(t *testing.T, marker string, n int) []delivery {
	t.Helper()
	var out []delivery
	eventually(t, fmt.Sprintf("%d deliveries of %s", n, marker), func() bool {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		out = out[:0]
		for _, d := range rc.got {
			if strings.Contains(string(d.body), marker) {
				out = append(out, d)
			}
		}
		return len(out) >= n
	})
	return out
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// svixOnly keeps the svix-* headers, so Verify cannot fall back on webhook-*.
func svixOnly(h http.Header) http.Header {
	out := http.Header{}
	for k, v := range h {
		if strings.HasPrefix(strings.ToLower(k), "svix-") {
			out[k] = v
		}
	}
	return out
}

func verify(t *testing.T, secret string, d delivery) {
	t.Helper()
	wh, err := svix.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	h := svixOnly(d.header)
	if h.Get("svix-id") == "" || h.Get("svix-id") != d.header.Get("webhook-id") {
		t.Fatalf("svix-id %q, webhook-id %q", h.Get("svix-id"), d.header.Get("webhook-id"))
	}
	if err := wh.Verify(d.body, h); err != nil {
		t.Fatalf("the SDK's Verify refused a delivery: %v (headers %v)", err, h)
	}
}

func TestFlow(t *testing.T) {
	base, token := os.Getenv("HOOKD_SDK_URL"), os.Getenv("HOOKD_SDK_TOKEN")
	if base == "" {
		t.Skip("HOOKD_SDK_URL is not set: run through hookd's internal/app TestSvixGoSDK")
	}
	ctx := context.Background()
	server, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	client, err := svix.New(token, &svix.SvixOptions{ServerUrl: server})
	if err != nil {
		t.Fatal(err)
	}
	rc := newReceiver(t)
	start := time.Now().Add(-time.Minute)

	// 1. An application and an endpoint to the loopback receiver.
	app, err := client.Application.Create(ctx, models.ApplicationIn{Name: "Go SDK", Uid: ptr("go-sdk-app")}, nil)
	if err != nil {
		t.Fatalf("Application.Create: %v", err)
	}
	if app.Uid == nil || *app.Uid != "go-sdk-app" || app.Id != "go-sdk-app" {
		t.Fatalf("application %+v", app)
	}
	again, err := client.Application.GetOrCreate(ctx, models.ApplicationIn{Name: "Go SDK", Uid: ptr("go-sdk-app")}, nil)
	if err != nil || again.Id != app.Id {
		t.Fatalf("Application.GetOrCreate: %+v, %v", again, err)
	}
	ep, err := client.Endpoint.Create(ctx, app.Id, models.EndpointIn{Url: rc.url, Description: ptr("orders"), Uid: ptr("orders-ep")}, nil)
	if err != nil {
		t.Fatalf("Endpoint.Create: %v", err)
	}
	if !strings.HasPrefix(ep.Id, "ep_") || ep.Url != rc.url {
		t.Fatalf("endpoint %+v", ep)
	}
	secret, err := client.Endpoint.GetSecret(ctx, app.Id, "orders-ep")
	if err != nil {
		t.Fatalf("Endpoint.GetSecret: %v", err)
	}

	// 2. A message arrives, and the SDK's own Verify accepts its signature.
	msg, err := client.Message.Create(ctx, app.Id, models.MessageIn{EventType: "order.created",
		Payload: map[string]any{"marker": "m-one"}, EventId: ptr("evt-one")}, nil)
	if err != nil {
		t.Fatalf("Message.Create: %v", err)
	}
	if !strings.HasPrefix(msg.Id, "msg_") || msg.EventId == nil || *msg.EventId != "evt-one" {
		t.Fatalf("message %+v", msg)
	}
	verify(t, secret.Key, rc.wait(t, "m-one", 1)[0])

	// 3. Its attempt is listed: a success.
	var attempts *models.ListResponseMessageAttemptOut
	eventually(t, "the attempt of m-one", func() bool {
		attempts, err = client.MessageAttempt.ListByEndpoint(ctx, app.Id, ep.Id, nil)
		return err == nil && len(attempts.Data) == 1
	})
	if a := attempts.Data[0]; a.MsgId != msg.Id || a.EndpointId != ep.Id || a.Status != models.MESSAGESTATUS_SUCCESS || a.ResponseStatusCode != 200 {
		t.Fatalf("attempt %+v", a)
	}

	// ... and recovered after a failure. Like Svix, hookd retries a 400 on
	// an endpoint made here; with no retries (set through /v1) it fails at
	// once, and recover sends it again once the endpoint is fixed.
	noRetries(t, base, token, ep.Id)
	rc.answer(http.StatusBadRequest)
	failed, err := client.Message.Create(ctx, app.Id, models.MessageIn{EventType: "order.created",
		Payload: map[string]any{"marker": "m-two"}}, nil)
	if err != nil {
		t.Fatalf("Message.Create: %v", err)
	}
	eventually(t, "m-two failed", func() bool {
		list, err := client.MessageAttempt.ListByMsg(ctx, app.Id, failed.Id, nil)
		return err == nil && len(list.Data) == 1 && list.Data[0].Status == models.MESSAGESTATUS_FAIL
	})
	rc.answer(http.StatusOK)
	task, err := client.Endpoint.Recover(ctx, app.Id, ep.Id, models.RecoverIn{Since: start}, nil)
	if err != nil {
		t.Fatalf("Endpoint.Recover: %v", err)
	}
	if task.Task != models.BACKGROUNDTASKTYPE_ENDPOINT_RECOVER {
		t.Fatalf("recover task %+v", task)
	}
	verify(t, secret.Key, rc.wait(t, "m-two", 2)[1])

	// 4. Rotate the secret: the next message verifies with the new one.
	if err := client.Endpoint.RotateSecret(ctx, app.Id, ep.Id, models.EndpointSecretRotateIn{}, nil); err != nil {
		t.Fatalf("Endpoint.RotateSecret: %v", err)
	}
	rotated, err := client.Endpoint.GetSecret(ctx, app.Id, ep.Id)
	if err != nil || rotated.Key == secret.Key {
		t.Fatalf("Endpoint.GetSecret after rotation: %v, %v", rotated, err)
	}
	if _, err := client.Message.Create(ctx, app.Id, models.MessageIn{EventType: "order.created",
		Payload: map[string]any{"marker": "m-three"}}, nil); err != nil {
		t.Fatalf("Message.Create: %v", err)
	}
	d := rc.wait(t, "m-three", 1)[0]
	verify(t, rotated.Key, d)
	verify(t, secret.Key, d) // the old secret signs for 24 h more

	// Moving off Svix: an endpoint made with the secret its receiver has
	// signs with it. Repeats answer the first message, lists filter, and
	// resend sends again.
	moved(ctx, t, client)

	// A call outside hookd's support answers Svix's error, not a crash.
	if _, err := client.Integration.List(ctx, app.Id, nil); err == nil || !strings.Contains(err.Error(), "501") {
		t.Fatalf("Integration.List: %v, want a 501", err)
	}

	// 5. 250 applications, paged with the SDK's iterator.
	for i := range 250 {
		if _, err := client.Application.Create(ctx, models.ApplicationIn{Name: fmt.Sprint("app ", i), Uid: ptr(fmt.Sprintf("page-%03d", i))}, nil); err != nil {
			t.Fatalf("Application.Create %d: %v", i, err)
		}
	}
	seen := map[string]bool{}
	opts := &svix.ApplicationListOptions{Limit: ptr(uint64(100))}
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("more than 10 pages")
		}
		page, err := client.Application.List(ctx, opts)
		if err != nil {
			t.Fatalf("Application.List: %v", err)
		}
		for _, a := range page.Data {
			if seen[a.Id] {
				t.Fatalf("application %s listed twice", a.Id)
			}
			seen[a.Id] = true
		}
		if page.Done {
			break
		}
		opts.Iterator = page.Iterator
	}
	n := 0
	for id := range seen {
		if strings.HasPrefix(id, "page-") {
			n++
		}
	}
	if n != 250 || !seen[app.Id] {
		t.Fatalf("listed %d of the 250 applications (and %s: %v)", n, app.Id, seen[app.Id])
	}
}

// moved is the migration and message steps, in an application of their
// own so the main flow's counts stay as they are.
func moved(ctx context.Context, t *testing.T, client *svix.Svix) {
	t.Helper()
	rc, other := newReceiver(t), newReceiver(t)
	chosen := "whsec_" + base64.StdEncoding.EncodeToString([]byte("exported from svix's server"))
	app, err := client.Application.Create(ctx, models.ApplicationIn{Name: "Go SDK moved", Uid: ptr("go-sdk-moved")}, nil)
	if err != nil {
		t.Fatalf("Application.Create: %v", err)
	}
	ep, err := client.Endpoint.Create(ctx, app.Id, models.EndpointIn{Url: rc.url, Secret: &chosen}, nil)
	if err != nil {
		t.Fatalf("Endpoint.Create with a secret: %v", err)
	}
	if _, err := client.Endpoint.Create(ctx, app.Id, models.EndpointIn{Url: other.url}, nil); err != nil {
		t.Fatalf("Endpoint.Create: %v", err)
	}
	create := func(typ, marker string, eventID *string, key string) *models.MessageOut {
		t.Helper()
		m, err := client.Message.Create(ctx, app.Id, models.MessageIn{EventType: typ, Payload: map[string]any{"marker": marker},
			EventId: eventID}, &svix.MessageCreateOptions{IdempotencyKey: ptr(key)})
		if err != nil {
			t.Fatalf("Message.Create %s: %v", marker, err)
		}
		return m
	}
	keyed := create("order.created", "k-one", nil, "go-sdk-key")
	if again := create("order.created", "k-repeat", nil, "go-sdk-key"); again.Id != keyed.Id {
		t.Fatalf("a repeated idempotency-key made %s, want the first message %s", again.Id, keyed.Id)
	}
	shipped := create("order.shipped", "e-one", ptr("go-sdk-event"), "go-sdk-key-2")
	if again := create("order.shipped", "e-repeat", ptr("go-sdk-event"), "go-sdk-key-3"); again.Id != shipped.Id {
		t.Fatalf("a repeated eventId made %s, want the first message %s", again.Id, shipped.Id)
	}
	verify(t, chosen, rc.wait(t, "k-one", 1)[0])
	verify(t, chosen, rc.wait(t, "e-one", 1)[0])

	// event_types, joined with commas by the SDK. (v1.74.1 cannot send
	// before or after: it fails serialising a time.Time query parameter.)
	for _, c := range []struct {
		types []string
		want  int
	}{{[]string{"order.shipped"}, 1}, {[]string{"order.shipped", "order.created"}, 2}, {[]string{"order.none"}, 0}} {
		list, err := client.Message.List(ctx, app.Id, &svix.MessageListOptions{EventTypes: &c.types})
		if err != nil || len(list.Data) != c.want || c.want == 1 && list.Data[0].Id != shipped.Id {
			t.Fatalf("Message.List %v: %+v, %v; want %d", c.types, list, err, c.want)
		}
	}

	// Attempts of one message at one endpoint; then resend it there.
	eventually(t, "k-one's attempt at each endpoint", func() bool {
		list, err := client.MessageAttempt.ListByMsg(ctx, app.Id, keyed.Id, nil)
		return err == nil && len(list.Data) == 2
	})
	eventually(t, "k-one's success at the moved endpoint", func() bool {
		list, err := client.MessageAttempt.ListByMsg(ctx, app.Id, keyed.Id, &svix.MessageAttemptListByMsgOptions{EndpointId: &ep.Id})
		if err != nil || len(list.Data) != 1 {
			return false
		}
		if list.Data[0].EndpointId != ep.Id {
			t.Fatalf("ListByMsg for %s listed an attempt at %s", ep.Id, list.Data[0].EndpointId)
		}
		return list.Data[0].Status == models.MESSAGESTATUS_SUCCESS
	})
	if err := client.MessageAttempt.Resend(ctx, app.Id, keyed.Id, ep.Id, nil); err != nil {
		t.Fatalf("MessageAttempt.Resend: %v", err)
	}
	both := rc.wait(t, "k-one", 2)
	if both[0].header.Get("svix-id") != both[1].header.Get("svix-id") {
		t.Fatalf("resent with svix-id %q, first sent with %q", both[1].header.Get("svix-id"), both[0].header.Get("svix-id"))
	}
	verify(t, chosen, both[1])
	if n := len(rc.wait(t, "repeat", 0)); n != 0 {
		t.Fatalf("the receiver got %d repeated messages", n)
	}
}

func ptr[T any](v T) *T { return &v }

// noRetries sets the endpoint's retry schedule to none through hookd's
// own API (Svix's has no such field): its next failure is final.
func noRetries(t *testing.T, base, token, epID string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPatch, base+"/v1/subscriptions/sub_"+strings.TrimPrefix(epID, "ep_"), strings.NewReader(`{"retry_schedule":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PATCH retry_schedule: %d", resp.StatusCode)
	}
}
