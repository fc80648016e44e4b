package storetest

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/seal"
	"hookd/internal/store"
)

// SealingBackend is what the sealing cases need of a backend beyond
// store.Store: one database they can open several times with different
// keyrings, and read and write as stored, past the sealing.
type SealingBackend struct {
	// Open opens a store on the database with keys; the case closes it.
	Open func(t *testing.T, keys *seal.Keyring) store.Store
	// Dump renders every column of every subscriptions row as stored.
	Dump func(t *testing.T) string
	// SetColumn writes one stored value of a subscription as given, as a
	// release before sealing wrote it.
	SetColumn func(t *testing.T, id, column, value string)
}

// RunSealing runs the cases on secrets at rest as subtests of t, each on a
// fresh, empty database made by newBackend.
func RunSealing(t *testing.T, newBackend func(t *testing.T) SealingBackend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b SealingBackend)
	}{
		{"SealedAtRest", testSealedAtRest},
		{"UnknownKeyRefused", testUnknownKeyRefused},
		{"PlaintextSealedAtOpen", testPlaintextSealedAtOpen},
		{"Rekey", testRekey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newBackend(t))
		})
	}
}

func newKeys(t *testing.T, keys ...string) *seal.Keyring {
	t.Helper()
	k, err := seal.Parse(strings.Join(keys, "\n"))
	noErr(t, "keyring", err)
	return k
}

func openWith(t *testing.T, b SealingBackend, k *seal.Keyring) store.Store {
	t.Helper()
	s := b.Open(t, k)
	t.Cleanup(func() { s.Close() })
	return s
}

// secret makes a recognisable whsec_ secret: its base64 part is searched too.
func secret(tag string) string {
	return "whsec_" + base64.StdEncoding.EncodeToString([]byte("known-"+tag+"-0123456789abcdef"))
}

// notStored fails if any of needles appears in the dump.
func notStored(t *testing.T, what, dump string, needles ...string) {
	t.Helper()
	for _, n := range needles {
		if strings.Contains(dump, n) {
			t.Errorf("%s: %q is stored in the clear", what, n)
		}
	}
}

// Secrets, previous secrets and header values never reach the store in the
// clear, through create, update (a rotation, new headers) and delete; they
// come back whole.
func testSealedAtRest(t *testing.T, b SealingBackend) {
	s := openWith(t, b, newKeys(t, seal.NewKey()))
	f := newFx(t, s)
	a := f.tenant()
	s1, s2, gone := secret("s1"), secret("s2"), secret("gone")
	sub := f.sub(a.ID, "a.example:443", func(s *core.Subscription) {
		s.Secret = s1
		s.Headers = map[string]string{"Authorization": "Bearer known-h1", "X-Api-Key": "known-h2"}
	})
	rotated := sub
	rotated.Secret, rotated.PrevSecret, rotated.PrevSecretExpiresAt = s2, s1, at(24*time.Hour)
	rotated.Headers = map[string]string{"X-Api-Key": "known-h3"}
	rotated.UpdatedAt = at(time.Second)
	noErr(t, "SubscriptionUpdate", s.SubscriptionUpdate(f.ctx, rotated))
	del := f.sub(a.ID, "b.example:443", func(s *core.Subscription) { s.Secret = gone })
	noErr(t, "SubscriptionDelete", s.SubscriptionDelete(f.ctx, a.ID, del.ID, at(time.Minute)))

	got, err := s.SubscriptionGet(f.ctx, a.ID, sub.ID)
	noErr(t, "SubscriptionGet", err)
	same(t, "rotated subscription", got, rotated)
	all, err := s.SubscriptionListAll(f.ctx)
	noErr(t, "SubscriptionListAll", err)
	same(t, "listed", all, []core.Subscription{rotated})
	page, err := s.SubscriptionList(f.ctx, store.SubscriptionListParams{TenantID: a.ID})
	noErr(t, "SubscriptionList", err)
	same(t, "paged", page.Data, []core.Subscription{rotated})

	dump := b.Dump(t)
	if !strings.Contains(dump, sub.ID) || !strings.Contains(dump, seal.Prefix) {
		t.Fatalf("the dump shows neither the subscription nor a sealed value:\n%s", dump)
	}
	notStored(t, "after create, rotate and delete", dump, s1, s2, gone,
		strings.TrimPrefix(s1, "whsec_"), strings.TrimPrefix(s2, "whsec_"), strings.TrimPrefix(gone, "whsec_"),
		"known-h1", "known-h2", "known-h3", "Authorization", "X-Api-Key")
}

// A value sealed under a key the store was not given is an error naming the
// subscription and the key, never read as plaintext; a rekey without that
// key refuses too.
func testUnknownKeyRefused(t *testing.T, b SealingBackend) {
	k1 := newKeys(t, seal.NewKey())
	s := openWith(t, b, k1)
	f := newFx(t, s)
	a := f.tenant()
	sub := f.sub(a.ID, "a.example:443")

	other := openWith(t, b, newKeys(t, seal.NewKey()))
	_, err := other.SubscriptionGet(f.ctx, a.ID, sub.ID)
	wantErr(t, "SubscriptionGet under another key", err, seal.ErrUnknownKey)
	if !strings.Contains(err.Error(), sub.ID) || !strings.Contains(err.Error(), k1.IDs()[0]) {
		t.Errorf("the error %q names neither the subscription nor key %s", err, k1.IDs()[0])
	}
	_, err = other.SubscriptionListAll(f.ctx)
	wantErr(t, "SubscriptionListAll under another key", err, seal.ErrUnknownKey)
	_, err = other.SubscriptionReseal(f.ctx, store.ResealParams{All: true, Limit: 10})
	wantErr(t, "SubscriptionReseal under another key", err, seal.ErrUnknownKey)
	got, err := s.SubscriptionGet(f.ctx, a.ID, sub.ID)
	noErr(t, "SubscriptionGet after the refused rekey", err)
	same(t, "subscription after the refused rekey", got, sub)
}

// What a release before sealing stored (plaintext secrets, credentials in
// the URL) is refused on read, and sealed when a store opens: the URL's
// credentials become the Authorization header they were sent as.
func testPlaintextSealedAtOpen(t *testing.T, b SealingBackend) {
	k := newKeys(t, seal.NewKey())
	s := openWith(t, b, k)
	f := newFx(t, s)
	a := f.tenant()
	plain, prev := secret("plain"), secret("prev")
	sub := f.sub(a.ID, "a.example:443")
	withAuth := f.sub(a.ID, "b.example:443", func(s *core.Subscription) {
		s.Headers = map[string]string{"Authorization": "Bearer kept"}
	})
	atSign := f.sub(a.ID, "c.example:443", func(s *core.Subscription) { s.URL = "https://c.example/a@b?c=d@e" })
	b.SetColumn(t, sub.ID, "secret", plain)
	b.SetColumn(t, sub.ID, "prev_secret", prev)
	b.SetColumn(t, sub.ID, "url", "https://alice:s3cr3t@a.example/hook?x=1")
	// Needles too long to turn up by chance in a sealed value's base64 or an
	// ID: CI failed once finding "pw2", a chance of about 1 in 250,000 at
	// each base64 position of the file.
	b.SetColumn(t, withAuth.ID, "url", "https://bob:pw2-of-bob@b.example/hook")

	_, err := s.SubscriptionGet(f.ctx, a.ID, sub.ID)
	wantErr(t, "SubscriptionGet of a plaintext secret", err, seal.ErrNotSealed)

	reopened := openWith(t, b, k)
	got, err := reopened.SubscriptionGet(f.ctx, a.ID, sub.ID)
	noErr(t, "SubscriptionGet after reopening", err)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:s3cr3t"))
	if got.Secret != plain || got.PrevSecret != prev || got.URL != "https://a.example/hook?x=1" ||
		len(got.Headers) != 1 || got.Headers["Authorization"] != basic || !got.UpdatedAt.Equal(sub.UpdatedAt) {
		t.Fatalf("after sealing at open: secret %q prev %q url %q headers %v updated %v",
			got.Secret, got.PrevSecret, got.URL, got.Headers, got.UpdatedAt)
	}
	got, err = reopened.SubscriptionGet(f.ctx, a.ID, withAuth.ID)
	noErr(t, "SubscriptionGet of the one with a header", err)
	if got.URL != "https://b.example/hook" || got.Headers["Authorization"] != "Bearer kept" {
		t.Fatalf("URL credentials beside an Authorization header: url %q headers %v", got.URL, got.Headers)
	}
	got, err = reopened.SubscriptionGet(f.ctx, a.ID, atSign.ID)
	noErr(t, "SubscriptionGet of the one with @ in its path", err)
	same(t, "a URL with @ outside its userinfo", got, atSign)
	notStored(t, "after sealing at open", b.Dump(t), plain, prev, "s3cr3t", "alice:", "pw2-of-bob")
}

// A rekey seals everything under the first key, deleted subscriptions
// included, in batches; after it the old key can go. Running it again
// changes nothing.
func testRekey(t *testing.T, b SealingBackend) {
	oldKey, newKey := seal.NewKey(), seal.NewKey()
	kOld := newKeys(t, oldKey)
	s := openWith(t, b, kOld)
	f := newFx(t, s)
	a := f.tenant()
	var want []core.Subscription
	for i := range 3 {
		want = append(want, f.sub(a.ID, "a.example:443", func(s *core.Subscription) {
			s.Secret = secret("r" + string(rune('0'+i)))
			if i == 1 {
				s.PrevSecret, s.PrevSecretExpiresAt = secret("p1"), at(time.Hour)
				s.Headers = map[string]string{"X-Api-Key": "known-rekey"}
			}
		}))
	}
	gone := f.sub(a.ID, "b.example:443")
	noErr(t, "SubscriptionDelete", s.SubscriptionDelete(f.ctx, a.ID, gone.ID, at(time.Minute)))

	both := openWith(t, b, newKeys(t, newKey, oldKey))
	changed := 0
	p := store.ResealParams{All: true, Limit: 2}
	for range 10 {
		res, err := both.SubscriptionReseal(f.ctx, p)
		noErr(t, "SubscriptionReseal", err)
		changed += res.Changed
		if res.Looked < p.Limit {
			break
		}
		p.After = res.Next
	}
	if changed != 4 {
		t.Fatalf("rekey changed %d subscriptions, want 4 (3 live, 1 deleted)", changed)
	}
	if dump := b.Dump(t); strings.Contains(dump, kOld.SealPrefix()) {
		t.Fatalf("a value is still under the old key after the rekey:\n%s", dump)
	}
	res, err := both.SubscriptionReseal(f.ctx, store.ResealParams{All: true, Limit: 10})
	noErr(t, "SubscriptionReseal again", err)
	if res.Changed != 0 {
		t.Fatalf("a second rekey changed %d subscriptions, want 0", res.Changed)
	}

	onlyNew := openWith(t, b, newKeys(t, newKey))
	all, err := onlyNew.SubscriptionListAll(f.ctx)
	noErr(t, "SubscriptionListAll with the new key alone", err)
	same(t, "subscriptions after the rekey", all, want)
}
