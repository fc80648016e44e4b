package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/ingest"
	"hookd/internal/shed"
	"hookd/internal/store"
	"hookd/internal/store/sqlite"
	"hookd/internal/subs"
	"hookd/internal/testenv"
	"hookd/webhook"
)

// flakyStore is the real SQLite store failing, once each, the first event
// insert of a type in failInsert and the first NoticeSent: what an ingest
// error, or a crash between the event's write and its notice's, leaves.
type flakyStore struct {
	store.Store
	mu         sync.Mutex
	failInsert map[string]bool
	failSent   bool
}

var errFlaky = errors.New("flaky store")

func (f *flakyStore) EventInsertBatch(ctx context.Context, batch []store.EventInsert) ([]store.EventInsertResult, error) {
	f.mu.Lock()
	for _, b := range batch {
		if f.failInsert[b.Event.Type] {
			delete(f.failInsert, b.Event.Type)
			f.mu.Unlock()
			return nil, errFlaky
		}
	}
	f.mu.Unlock()
	return f.Store.EventInsertBatch(ctx, batch)
}

func (f *flakyStore) NoticeSent(ctx context.Context, n store.Notice) error {
	f.mu.Lock()
	fail := f.failSent
	f.failSent = false
	f.mu.Unlock()
	if fail {
		return errFlaky
	}
	return f.Store.NoticeSent(ctx, n)
}

type noticeBundle struct {
	st   *flakyStore
	life *Lifecycle
	svc  *subs.Service
	ops  core.Subscription
}

// setupNotices is a node without a dispatcher: what is written is what
// is asserted, in the store. The tenant's ops subscription asks for hookd.*.
func setupNotices(t *testing.T) *noticeBundle {
	sq, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "notices.db"), testenv.Keys(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Close() })
	b := &noticeBundle{st: &flakyStore{Store: sq, failInsert: map[string]bool{}}}
	reg := subs.New(nil)
	b.svc = subs.NewService(b.st, reg, nil)
	in := ingest.New(b.st, reg, func([]core.Job) {})
	t.Cleanup(in.Close)
	b.life = New(Config{Store: b.st, Subs: b.svc, Ingest: in, DisableAfter: DefaultDisableAfter,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	b.ops = b.subscribe(t, "https://ops.example/hooks", "hookd.*")
	return b
}

func (b *noticeBundle) subscribe(t *testing.T, url, pattern string) core.Subscription {
	t.Helper()
	host, err := core.EndpointHost("url", url)
	if err != nil {
		t.Fatal(err)
	}
	secret, _ := webhook.NewSecret()
	now := time.Now().UTC()
	sub := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: url, Host: host,
		EventTypes: []string{pattern}, Secret: secret, State: core.SubActive, CreatedAt: now, UpdatedAt: now}
	if err := b.svc.Create(t.Context(), sub); err != nil {
		t.Fatal(err)
	}
	return sub
}

// written lists the events of typ in the store, each with the
// subscriptions it was written for.
func (b *noticeBundle) written(t *testing.T, typ string) map[string][]string {
	t.Helper()
	page, err := b.st.EventList(t.Context(), store.EventListParams{TenantID: core.DefaultTenant, Types: []string{typ}, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, ev := range page.Data {
		_, ds, err := b.st.EventGet(t.Context(), "", ev.ID)
		if err != nil {
			t.Fatal(err)
		}
		out[ev.ID] = []string{}
		for _, d := range ds {
			out[ev.ID] = append(out[ev.ID], d.SubscriptionID)
		}
	}
	return out
}

// once checks that typ was written exactly once, for the ops subscription.
func (b *noticeBundle) once(t *testing.T, typ, when string) {
	t.Helper()
	got := b.written(t, typ)
	if len(got) != 1 {
		t.Fatalf("%s: %d %s events written, want 1: %v", when, len(got), typ, got)
	}
	for _, to := range got {
		if len(to) != 1 || to[0] != b.ops.ID {
			t.Fatalf("%s: the %s event went to %v, want the ops subscription %s", when, typ, to, b.ops.ID)
		}
	}
}

// A disable's event is written exactly once though its first write
// fails (the scan writes it) or its notice is not marked sent after the
// write (the scan writes it again, and the second is a duplicate).
func TestDisabledEventIsWrittenOnceThroughFailures(t *testing.T) {
	for _, fail := range []string{"the event's write", "marking it sent"} {
		t.Run(fail, func(t *testing.T) {
			b := setupNotices(t)
			dead := b.subscribe(t, "https://dead.example/hook", "order.*")
			if fail == "the event's write" {
				b.st.failInsert[TypeDisabled] = true
			} else {
				b.st.failSent = true
			}
			if err := b.life.Disable(t.Context(), dead.ID, "endpoint answered 410 Gone"); err != nil {
				t.Fatal(err)
			}
			if got, _ := b.st.SubscriptionGet(t.Context(), "", dead.ID); got.State != core.SubDisabled {
				t.Fatalf("after Disable: %s", got.State)
			}
			if fail == "the event's write" {
				if got := b.written(t, TypeDisabled); len(got) != 0 {
					t.Fatalf("the failed write wrote %v", got)
				}
			}
			b.life.Scan(t.Context(), time.Now())
			b.once(t, TypeDisabled, "after a scan")
			b.life.Scan(t.Context(), time.Now())
			b.once(t, TypeDisabled, "after another scan")
			if ns, err := b.st.Notices(t.Context()); err != nil || len(ns) != 0 {
				t.Fatalf("notices left: %+v %v", ns, err)
			}
			// Its key is the decision, as docs/api.md says.
			off, _ := b.st.SubscriptionGet(t.Context(), "", dead.ID)
			page, err := b.st.EventList(t.Context(), store.EventListParams{TenantID: core.DefaultTenant, Types: []string{TypeDisabled}, Limit: 1})
			if want := TypeDisabled + ":" + dead.ID + ":" + off.UpdatedAt.UTC().Format(time.RFC3339Nano); err != nil || page.Data[0].IdempotencyKey != want {
				t.Errorf("the event's idempotency key %q (%v), want %q", page.Data[0].IdempotencyKey, err, want)
			}
		})
	}
}

// A finished replay's event likewise: the runner's call fails, the scan
// writes it, once.
func TestReplayCompletedIsWrittenOnceThroughFailures(t *testing.T) {
	for _, fail := range []string{"the event's write", "marking it sent"} {
		t.Run(fail, func(t *testing.T) {
			b := setupNotices(t)
			sub := b.subscribe(t, "https://replayed.example/hook", "order.*")
			now := time.Now().UTC()
			j := core.ReplayJob{ID: core.NewID("rpl"), TenantID: sub.TenantID, SubscriptionID: sub.ID, Since: now.Add(-time.Hour),
				EventTypes: []string{}, States: core.ReplayStatesDefault, Rate: 10, State: core.ReplayRunning, CreatedAt: now, UpdatedAt: now}
			if err := b.st.ReplayJobCreate(t.Context(), j); err != nil {
				t.Fatal(err)
			}
			done, _, err := b.st.ReplayJobStep(t.Context(), j.ID, 10, now)
			if err != nil || done.State != core.ReplayDone {
				t.Fatalf("step: %+v %v", done, err)
			}
			if fail == "the event's write" {
				b.st.failInsert[TypeReplayCompleted] = true
			} else {
				b.st.failSent = true
			}
			b.life.ReplayCompleted(t.Context(), done)
			b.life.Scan(t.Context(), time.Now())
			b.once(t, TypeReplayCompleted, "after a scan")
			b.life.Scan(t.Context(), time.Now())
			b.once(t, TypeReplayCompleted, "after another scan")
		})
	}
}

// Nodes decide shedding alike from the store's counts, each at its own
// reading: the owner is told once that it began, with the first node's
// time, and once that it ended, with that same time, whichever node sees
// each first. (Each node telling at its own time, the keys differed and
// every node's event was written.)
func TestSheddingIsToldOnceByNodesDecidingAlike(t *testing.T) {
	b := setupNotices(t)
	other := New(Config{Store: b.st, Subs: b.svc, Ingest: b.life.cfg.Ingest, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	slow := b.subscribe(t, "https://slow.example/hook", "order.*")
	first := time.Now().UTC().Truncate(time.Microsecond)
	b.life.Shed(t.Context(), shed.Change{SubscriptionID: slow.ID, Since: first, Pending: 120}, 100)
	other.Shed(t.Context(), shed.Change{SubscriptionID: slow.ID, Since: first.Add(20 * time.Second), Pending: 130}, 100)
	b.once(t, TypeShedding, "after both nodes began")
	ended := first.Add(time.Hour)
	other.Shed(t.Context(), shed.Change{SubscriptionID: slow.ID, Since: first.Add(20 * time.Second), Ended: ended}, 100)
	b.life.Shed(t.Context(), shed.Change{SubscriptionID: slow.ID, Since: first, Ended: ended.Add(20 * time.Second)}, 100)
	b.once(t, TypeSheddingEnded, "after both nodes ended")
	for typ, want := range map[string]string{TypeShedding: first.Format(time.RFC3339Nano), TypeSheddingEnded: first.Format(time.RFC3339Nano)} {
		page, err := b.st.EventList(t.Context(), store.EventListParams{TenantID: core.DefaultTenant, Types: []string{typ}, Limit: 1})
		if err != nil || len(page.Data) != 1 {
			t.Fatalf("%s: %+v %v", typ, page, err)
		}
		ev, _, err := b.st.EventGet(t.Context(), "", page.Data[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Since time.Time `json:"shedding_since"`
		}
		if err := json.Unmarshal(ev.Payload, &p); err != nil || p.Since.Format(time.RFC3339Nano) != want {
			t.Errorf("%s: shedding_since %s (%v), want the first node's %s", typ, p.Since, err, want)
		}
	}
	// A restarted node takes the shedding up from the store.
	kept, err := b.st.SubscriptionsShed(t.Context())
	if err != nil || len(kept) != 0 {
		t.Errorf("after the end the store keeps %v (%v), want none", kept, err)
	}
	b.life.Shed(t.Context(), shed.Change{SubscriptionID: slow.ID, Since: ended.Add(time.Minute), Pending: 140}, 100)
	if kept, err := b.st.SubscriptionsShed(t.Context()); err != nil || !kept[slow.ID].Equal(ended.Add(time.Minute)) {
		t.Errorf("while shed again the store keeps %v (%v), want %s since %s", kept, err, slow.ID, ended.Add(time.Minute))
	}
}
