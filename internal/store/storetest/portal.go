package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// A portal link is exchanged once, before it expires, for a key of its
// tenant scoped to the portal and expiring with it; a second exchange
// fails, also when several race (the store decides).
func testPortalLinks(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	link := func(expires time.Duration) core.PortalLink {
		t.Helper()
		l := core.PortalLink{ID: core.NewID("ptl"), TenantID: a.ID, Hash: hashKey(core.NewID("pt")), CreatedAt: t0, ExpiresAt: at(expires)}
		noErr(t, "PortalLinkCreate", s.PortalLinkCreate(f.ctx, l))
		return l
	}
	key := func() core.APIKey {
		return core.APIKey{ID: core.NewID("key"), Hash: hashKey(core.NewID("hk")), Name: "portal", Prefix: "hk_abcd", CreatedAt: at(time.Minute)}
	}
	wantErr(t, "PortalLinkCreate(missing tenant)", s.PortalLinkCreate(f.ctx,
		core.PortalLink{ID: core.NewID("ptl"), TenantID: "ten_missing", Hash: hashKey("x"), CreatedAt: t0, ExpiresAt: at(time.Hour)}), store.ErrNotFound)

	l := link(time.Hour)
	_, err := s.PortalLinkRedeem(f.ctx, hashKey("not a token"), at(time.Minute), key())
	wantErr(t, "PortalLinkRedeem(unknown)", err, store.ErrNotFound)
	k := key()
	got, err := s.PortalLinkRedeem(f.ctx, l.Hash, at(time.Minute), k)
	noErr(t, "PortalLinkRedeem", err)
	want := k
	want.TenantID, want.ExpiresAt, want.Scope = a.ID, l.ExpiresAt, core.ScopePortal
	same(t, "portal key", got, want)
	stored, err := s.APIKeyByHash(f.ctx, k.Hash)
	noErr(t, "APIKeyByHash(portal key)", err)
	same(t, "stored portal key", stored, want)
	_, err = s.PortalLinkRedeem(f.ctx, l.Hash, at(2*time.Minute), key())
	wantErr(t, "PortalLinkRedeem(second use)", err, store.ErrNotFound)

	// Expired: refused, and no key made.
	old := link(time.Minute)
	late := key()
	_, err = s.PortalLinkRedeem(f.ctx, old.Hash, at(time.Minute), late)
	wantErr(t, "PortalLinkRedeem(at its expiry)", err, store.ErrNotFound)
	_, err = s.APIKeyByHash(f.ctx, late.Hash)
	wantErr(t, "APIKeyByHash(key of an expired link)", err, store.ErrNotFound)

	// Racing: exactly one exchange wins.
	race := link(time.Hour)
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, lost := 0, 0
	for range 8 {
		wg.Go(func() {
			_, err := s.PortalLinkRedeem(f.ctx, race.Hash, at(time.Minute), key())
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, store.ErrNotFound):
				lost++
			default:
				t.Errorf("racing PortalLinkRedeem: %v", err)
			}
		})
	}
	wg.Wait()
	if won != 1 || lost != 7 {
		t.Fatalf("8 racing exchanges of one link: %d won, %d lost; want 1 and 7", won, lost)
	}

	// A deleted tenant's unused link is refused, and makes no key.
	unused := link(time.Hour)
	noErr(t, "TenantDelete", s.TenantDelete(f.ctx, a.ID, at(time.Minute)))
	orphan := key()
	_, err = s.PortalLinkRedeem(f.ctx, unused.Hash, at(2*time.Minute), orphan)
	wantErr(t, "PortalLinkRedeem(deleted tenant)", err, store.ErrNotFound)
	_, err = s.APIKeyByHash(f.ctx, orphan.Hash)
	wantErr(t, "APIKeyByHash(key of a deleted tenant's link)", err, store.ErrNotFound)
	// Nor is a new link made for it (the API answered 201 for a link that could never be used).
	wantErr(t, "PortalLinkCreate(deleted tenant)", s.PortalLinkCreate(f.ctx,
		core.PortalLink{ID: core.NewID("ptl"), TenantID: a.ID, Hash: hashKey("y"), CreatedAt: at(3 * time.Minute), ExpiresAt: at(time.Hour)}), store.ErrNotFound)
}
