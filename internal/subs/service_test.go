package subs

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/internal/store/sqlite"
	"hookd/internal/testenv"
)

// hookStore is the real SQLite store with a hook run before each
// subscription write; a hook's error fails the write unattempted.
type hookStore struct {
	store.Store
	mu       sync.Mutex
	onUpdate func(s core.Subscription) error
	onDelete func(id string) error
	writes   int
}

func (h *hookStore) SubscriptionUpdate(ctx context.Context, s core.Subscription) error {
	h.mu.Lock()
	h.writes++
	hook := h.onUpdate
	h.mu.Unlock()
	if hook != nil {
		if err := hook(s); err != nil {
			return err
		}
	}
	return h.Store.SubscriptionUpdate(ctx, s)
}

// SubscriptionDisable is a subscription write too, hooked as an update.
func (h *hookStore) SubscriptionDisable(ctx context.Context, s core.Subscription, notice []byte) error {
	h.mu.Lock()
	h.writes++
	hook := h.onUpdate
	h.mu.Unlock()
	if hook != nil {
		if err := hook(s); err != nil {
			return err
		}
	}
	return h.Store.SubscriptionDisable(ctx, s, notice)
}

func (h *hookStore) SubscriptionDelete(ctx context.Context, tenantID, id string, now time.Time) error {
	h.mu.Lock()
	h.writes++
	hook := h.onDelete
	h.mu.Unlock()
	if hook != nil {
		if err := hook(id); err != nil {
			return err
		}
	}
	return h.Store.SubscriptionDelete(ctx, tenantID, id, now)
}

func (h *hookStore) setUpdate(f func(core.Subscription) error) {
	h.mu.Lock()
	h.onUpdate = f
	h.mu.Unlock()
}

func (h *hookStore) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.writes
}

type wake struct{ host, id string }

type svcBundle struct {
	st    *hookStore
	svc   *Service
	mu    sync.Mutex
	wakes []wake
}

func (b *svcBundle) woken() []wake {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]wake(nil), b.wakes...)
}

func setupService(t *testing.T) *svcBundle {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hookd.db"), testenv.Keys(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b := &svcBundle{st: &hookStore{Store: st}}
	b.svc = NewService(b.st, New(nil), func(host, id string) {
		b.mu.Lock()
		b.wakes = append(b.wakes, wake{host, id})
		b.mu.Unlock()
	})
	return b
}

// create makes an active subscription on host through the service.
func (b *svcBundle) create(t *testing.T, host string) core.Subscription {
	t.Helper()
	now := time.Now().UTC()
	s := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: "https://" + host + "/",
		Host: host, EventTypes: []string{"*"}, Secret: "whsec_c2VjcmV0", State: core.SubActive, CreatedAt: now, UpdatedAt: now}
	if err := b.svc.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

func (b *svcBundle) stored(t *testing.T, id string) core.Subscription {
	t.Helper()
	s, err := b.st.SubscriptionGet(t.Context(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func setState(st core.SubscriptionState) func(*core.Subscription) error {
	return func(s *core.Subscription) error { s.State = st; return nil }
}

// The store is written first, then the registry, then the wake-up.
func TestServiceChangesStoreThenRegistryThenWakes(t *testing.T) {
	b := setupService(t)
	sub := b.create(t, "a.example:443")
	if got, ok := b.svc.Registry().Get(sub.ID); !ok || got.State != core.SubActive {
		t.Fatalf("registry after Create: %+v %v", got, ok)
	}
	if _, err := b.svc.Update(t.Context(), "", sub.ID, setState(core.SubPaused)); err != nil {
		t.Fatal(err)
	}

	var order []string
	b.st.setUpdate(func(core.Subscription) error {
		if cur, _ := b.svc.Registry().Get(sub.ID); cur.State != core.SubPaused {
			t.Errorf("registry shows %s before the store is written", cur.State)
		}
		order = append(order, "store")
		return nil
	})
	b.svc.wake = func(host, id string) {
		if cur, _ := b.svc.Registry().Get(id); cur.State != core.SubActive {
			t.Errorf("woken while the registry shows %s", cur.State)
		}
		if s := b.stored(t, id); s.State != core.SubActive {
			t.Errorf("woken while the store holds %s", s.State)
		}
		order = append(order, "wake "+host)
	}
	got, err := b.svc.Update(t.Context(), "", sub.ID, setState(core.SubActive))
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != 2 || order[0] != "store" || order[1] != "wake a.example:443" {
		t.Errorf("order %v, want the store write then the wake-up", order)
	}
	if !got.UpdatedAt.After(sub.UpdatedAt) || got.State != core.SubActive {
		t.Errorf("returned %+v", got)
	}
}

// A resume wakes the dispatcher, and so do a pause and a disable (it
// forgets what it queued); a change that leaves an active subscription
// where it was does not. A move while active does.
func TestServiceWakesWhenHeldWorkMayGo(t *testing.T) {
	b := setupService(t)
	sub := b.create(t, "a.example:443")
	steps := []struct {
		name   string
		mutate func(*core.Subscription) error
		want   []wake
	}{
		{"pause", setState(core.SubPaused), []wake{{"a.example:443", sub.ID}}},
		{"move while paused", func(s *core.Subscription) error {
			s.URL, s.Host = "https://b.example/", "b.example:443"
			return nil
		}, nil},
		{"resume", setState(core.SubActive), []wake{{"b.example:443", sub.ID}}},
		{"rate limit", func(s *core.Subscription) error { s.RateLimit = 5; return nil }, nil},
		{"move while active", func(s *core.Subscription) error {
			s.URL, s.Host = "https://c.example/", "c.example:443"
			return nil
		}, []wake{{"c.example:443", sub.ID}}},
		// A new path is a new endpoint: what the old one's circuit held may go.
		{"new path on the same host", func(s *core.Subscription) error { s.URL = "https://c.example/fixed"; return nil },
			[]wake{{"c.example:443", sub.ID}}},
		{"disable", setState(core.SubDisabled), []wake{{"c.example:443", sub.ID}}},
	}
	for _, st := range steps {
		before := len(b.woken())
		if _, err := b.svc.Update(t.Context(), "", sub.ID, st.mutate); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := b.woken()[before:]; len(got) != len(st.want) || len(got) == 1 && got[0] != st.want[0] {
			t.Errorf("%s: woke %v, want %v", st.name, got, st.want)
		}
	}
}

// A failed store write leaves the registry as it was, and wakes no one.
func TestServiceLeavesRegistryAloneWhenTheStoreFails(t *testing.T) {
	b := setupService(t)
	sub := b.create(t, "a.example:443")
	if _, err := b.svc.Update(t.Context(), "", sub.ID, setState(core.SubPaused)); err != nil {
		t.Fatal(err)
	}
	before, _ := b.svc.Registry().Get(sub.ID)
	woken := len(b.woken()) // the pause's
	boom := errors.New("disk full")
	b.st.setUpdate(func(core.Subscription) error { return boom })
	b.st.onDelete = func(string) error { return boom }

	if _, err := b.svc.Update(t.Context(), "", sub.ID, setState(core.SubActive)); !errors.Is(err, boom) {
		t.Fatalf("Update: %v, want %v", err, boom)
	}
	if _, err := b.svc.Disable(t.Context(), sub.ID, "410"); !errors.Is(err, boom) {
		t.Fatalf("Disable: %v, want %v", err, boom)
	}
	if _, err := b.svc.Rotate(t.Context(), "", sub.ID); !errors.Is(err, boom) {
		t.Fatalf("Rotate: %v, want %v", err, boom)
	}
	if err := b.svc.Delete(t.Context(), "", sub.ID); !errors.Is(err, boom) {
		t.Fatalf("Delete: %v, want %v", err, boom)
	}
	if got, ok := b.svc.Registry().Get(sub.ID); !ok || got != before {
		t.Errorf("registry changed after failed writes: %+v %v", got, ok)
	}
	if w := b.woken()[woken:]; len(w) != 0 {
		t.Errorf("woke %v after failed writes", w)
	}
	// A refused mutation writes nothing.
	refused := errors.New("invalid")
	writes := b.st.count()
	if _, err := b.svc.Update(t.Context(), "", sub.ID, func(*core.Subscription) error { return refused }); !errors.Is(err, refused) {
		t.Fatalf("Update with a refusing mutate: %v", err)
	}
	if b.st.count() != writes {
		t.Error("a refused mutation reached the store")
	}
}

func TestServiceNotFound(t *testing.T) {
	b := setupService(t)
	sub := b.create(t, "a.example:443")
	other := "ten_other"
	if _, err := b.svc.Update(t.Context(), other, sub.ID, setState(core.SubPaused)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Update of another tenant's: %v, want not found", err)
	}
	if _, err := b.svc.Rotate(t.Context(), other, sub.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Rotate of another tenant's: %v, want not found", err)
	}
	if err := b.svc.Delete(t.Context(), other, sub.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Delete of another tenant's: %v, want not found", err)
	}
	if err := b.svc.Delete(t.Context(), "", sub.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.svc.Registry().Get(sub.ID); ok {
		t.Error("deleted subscription still in the registry")
	}
	if err := b.svc.Delete(t.Context(), "", sub.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second Delete: %v, want not found", err)
	}
	if err := b.svc.Create(t.Context(), sub); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Create with a used ID: %v, want conflict", err)
	}
	if _, ok := b.svc.Registry().Get(sub.ID); ok {
		t.Error("a refused Create reached the registry")
	}
}

// notice is a disabled notice's payload: what the subscription was
// written with.
func notice(s core.Subscription) ([]byte, error) {
	return []byte(`{"reason":"` + s.DisabledReason + `","at":"` + s.UpdatedAt.Format(time.RFC3339Nano) + `"}`), nil
}

// DisableWithNotice writes once, with the notice made from the
// subscription as written: disabling again, or a deleted subscription, is
// a no-op that reaches no store write. Disable is the same without one.
func TestServiceDisable(t *testing.T) {
	b := setupService(t)
	sub := b.create(t, "a.example:443")
	off, changed, err := b.svc.DisableWithNotice(t.Context(), sub.ID, "endpoint answered 410", notice)
	if err != nil || !changed {
		t.Fatalf("Disable: changed %v, %v; want it changed", changed, err)
	}
	s := b.stored(t, sub.ID)
	r, _ := b.svc.Registry().Get(sub.ID)
	if s.State != core.SubDisabled || s.DisabledReason != "endpoint answered 410" || r.State != core.SubDisabled || !off.UpdatedAt.Equal(s.UpdatedAt) {
		t.Fatalf("after Disable: store %s %q, registry %s, answered %+v", s.State, s.DisabledReason, r.State, off)
	}
	ns, err := b.st.Notices(t.Context())
	if want, _ := notice(s); err != nil || len(ns) != 1 || string(ns[0].Disabled) != string(want) {
		t.Fatalf("notices after Disable: %+v %v, want one with %s", ns, err, want)
	}
	writes := b.st.count()
	if _, changed, err := b.svc.DisableWithNotice(t.Context(), sub.ID, "again", notice); err != nil || changed {
		t.Fatalf("Disable again: changed %v, %v; want nothing changed", changed, err)
	}
	gone := b.create(t, "b.example:443")
	if err := b.svc.Delete(t.Context(), "", gone.ID); err != nil {
		t.Fatal(err)
	}
	writes++ // the delete
	if changed, err := b.svc.Disable(t.Context(), gone.ID, "410"); err != nil || changed {
		t.Fatalf("Disable of a deleted subscription: changed %v, %v; want nothing changed", changed, err)
	}
	if b.st.count() != writes {
		t.Errorf("%d store writes, want %d: a no-op Disable wrote", b.st.count(), writes)
	}
	if s := b.stored(t, sub.ID); s.DisabledReason != "endpoint answered 410" {
		t.Errorf("reason %q after a second Disable, want the first", s.DisabledReason)
	}
	// A notice that cannot be made fails the disable, which writes nothing.
	other := b.create(t, "c.example:443")
	bad := errors.New("no payload")
	if _, _, err := b.svc.DisableWithNotice(t.Context(), other.ID, "410", func(core.Subscription) ([]byte, error) { return nil, bad }); !errors.Is(err, bad) {
		t.Fatalf("Disable with a failing notice: %v, want %v", err, bad)
	}
	if s := b.stored(t, other.ID); s.State != core.SubActive {
		t.Errorf("after a failed Disable: %s", s.State)
	}
	// Disable records no notice.
	if changed, err := b.svc.Disable(t.Context(), other.ID, "disabled by request"); err != nil || !changed {
		t.Fatalf("Disable: changed %v, %v", changed, err)
	}
	if ns, err := b.st.Notices(t.Context()); err != nil || len(ns) != 1 || ns[0].SubscriptionID != sub.ID {
		t.Errorf("notices after a Disable without one: %+v %v, want only the first", ns, err)
	}
}

func TestServiceRotate(t *testing.T) {
	b := setupService(t)
	sub := b.create(t, "a.example:443")
	got, err := b.svc.Rotate(t.Context(), core.DefaultTenant, sub.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Secret == sub.Secret || got.PrevSecret != sub.Secret {
		t.Fatalf("rotated: secret %q prev %q; want a new one and the old as previous", got.Secret, got.PrevSecret)
	}
	if d := time.Until(got.PrevSecretExpiresAt); d < core.SecretGracePeriod-time.Minute || d > core.SecretGracePeriod {
		t.Errorf("previous secret expires in %v, want about %v", d, core.SecretGracePeriod)
	}
	if r, _ := b.svc.Registry().Get(sub.ID); r.Secret != got.Secret || r.PrevSecret != sub.Secret {
		t.Error("the registry does not sign with the new secret and the previous one")
	}
	if s := b.stored(t, sub.ID); s.Secret != got.Secret {
		t.Error("the store does not hold the new secret")
	}
}

// Changes to one subscription take turns; another subscription's change
// does not wait for them.
func TestServiceSerialisesPerSubscription(t *testing.T) {
	b := setupService(t)
	slow, other := b.create(t, "a.example:443"), b.create(t, "b.example:443")
	entered, gate := make(chan struct{}), make(chan struct{})
	b.st.setUpdate(func(s core.Subscription) error {
		if s.ID == slow.ID && s.RateLimit == 1 {
			close(entered)
			<-gate // a disable skipping a large backlog
		}
		return nil
	})
	first := make(chan error, 1)
	go func() {
		_, err := b.svc.Update(context.Background(), "", slow.ID, func(s *core.Subscription) error { s.RateLimit = 1; return nil })
		first <- err
	}()
	<-entered

	if _, err := b.svc.Update(t.Context(), "", other.ID, setState(core.SubPaused)); err != nil {
		t.Fatalf("another subscription's change: %v", err)
	}
	// A second change of the slow one waits; its caller may give up.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.svc.Update(ctx, "", slow.ID, setState(core.SubPaused)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a change while another of the same subscription is in the store: %v, want it to wait", err)
	}
	second := make(chan error, 1)
	go func() {
		_, err := b.svc.Update(context.Background(), "", slow.ID, func(s *core.Subscription) error {
			if s.RateLimit != 1 {
				t.Errorf("the second change read rate limit %v: it ran before the first was written", s.RateLimit)
			}
			s.RateLimit = 2
			return nil
		})
		second <- err
	}()
	close(gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if s, r := b.stored(t, slow.ID), must(b.svc.Registry().Get(slow.ID)); s.RateLimit != 2 || r.RateLimit != 2 {
		t.Errorf("rate limit: store %v, registry %v; want 2 in both", s.RateLimit, r.RateLimit)
	}
	b.svc.locks.mu.Lock()
	defer b.svc.locks.mu.Unlock()
	if n := len(b.svc.locks.m); n != 0 {
		t.Errorf("%d locks kept after every change ended, want 0", n)
	}
}

func must(s *core.Subscription, ok bool) *core.Subscription {
	if !ok {
		return &core.Subscription{}
	}
	return s
}

// Reload brings in what was written to the store by others.
func TestServiceReload(t *testing.T) {
	b := setupService(t)
	kept, gone := b.create(t, "a.example:443"), b.create(t, "b.example:443")
	now := time.Now().UTC()
	elsewhere := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: "https://c.example/",
		Host: "c.example:443", EventTypes: []string{"*"}, Secret: "whsec_c2VjcmV0", State: core.SubActive, CreatedAt: now, UpdatedAt: now}
	if err := b.st.Store.SubscriptionCreate(t.Context(), elsewhere); err != nil {
		t.Fatal(err)
	}
	if err := b.st.Store.SubscriptionDelete(t.Context(), "", gone.ID, now); err != nil {
		t.Fatal(err)
	}
	changed, err := b.svc.Reload(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]bool{elsewhere.ID: true, gone.ID: true}; !maps.Equal(changed, want) {
		t.Errorf("reload says %v changed, want %v: the created and the deleted one", changed, want)
	}
	if again, err := b.svc.Reload(t.Context()); err != nil || len(again) != 0 {
		t.Errorf("a second reload with nothing changed says %v changed (err %v)", again, err)
	}
	reg := b.svc.Registry()
	if _, ok := reg.Get(kept.ID); !ok {
		t.Error("reload lost a live subscription")
	}
	if _, ok := reg.Get(elsewhere.ID); !ok {
		t.Error("reload did not bring in a subscription created elsewhere")
	}
	if _, ok := reg.Get(gone.ID); ok {
		t.Error("reload kept a subscription deleted elsewhere")
	}
}
