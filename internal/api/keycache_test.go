package api

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/internal/store/sqlite"
	"hookd/internal/testenv"
)

// countingStore counts key reads and last-use writes, and can hold a key
// read, once done, until released.
type countingStore struct {
	store.Store
	reads, touches atomic.Int32
	mu             sync.Mutex
	lastTouch      map[string]time.Time
	hold           chan struct{} // non-nil: reads wait for it to close
	reading        chan struct{} // told when a read begins, if non-nil
}

func (c *countingStore) APIKeyByHash(ctx context.Context, hash string) (core.APIKey, error) {
	c.reads.Add(1)
	k, err := c.Store.APIKeyByHash(ctx, hash)
	if c.reading != nil {
		c.reading <- struct{}{}
	}
	if c.hold != nil {
		<-c.hold
	}
	return k, err
}

func (c *countingStore) APIKeysTouch(ctx context.Context, used map[string]time.Time) error {
	c.touches.Add(1)
	c.mu.Lock()
	c.lastTouch = used
	c.mu.Unlock()
	return c.Store.APIKeysTouch(ctx, used)
}

type keyBundle struct {
	st    *countingStore
	cache *KeyCache
	now   time.Time // the cache's clock, moved by the test
	key   core.APIKey
}

func setupKeys(t *testing.T, expires time.Time) *keyBundle {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hookd.db"), testenv.Keys(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b := &keyBundle{st: &countingStore{Store: st}, now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	b.key = core.APIKey{ID: core.NewID("key"), TenantID: core.DefaultTenant, Hash: HashKey("hk_test"),
		CreatedAt: b.now, ExpiresAt: expires}
	if err := st.APIKeyCreate(t.Context(), b.key); err != nil {
		t.Fatal(err)
	}
	b.cache = NewKeyCache(b.st, nil)
	b.cache.now = func() time.Time { return b.now }
	return b
}

func (b *keyBundle) lookup(t *testing.T) bool {
	t.Helper()
	k, ok, err := b.cache.Lookup(t.Context(), b.key.Hash)
	if err != nil {
		t.Fatal(err)
	}
	if ok && k.ID != b.key.ID {
		t.Fatalf("looked up %s, want %s", k.ID, b.key.ID)
	}
	return ok
}

// Requests read a key from the store once per KeyCacheTTL and write its
// last use only when flushed: no write on the request path.
func TestKeyCacheReadsOncePerTTLAndWritesUseOnFlush(t *testing.T) {
	b := setupKeys(t, time.Time{})
	for range 100 {
		if !b.lookup(t) {
			t.Fatal("a live key was refused")
		}
	}
	if r, w := b.st.reads.Load(), b.st.touches.Load(); r != 1 || w != 0 {
		t.Fatalf("100 requests: %d reads, %d writes; want 1 and 0", r, w)
	}
	b.now = b.now.Add(KeyCacheTTL)
	b.lookup(t)
	if r := b.st.reads.Load(); r != 2 {
		t.Fatalf("after the cache lifetime: %d reads, want 2", r)
	}
	if err := b.cache.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := b.cache.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if w := b.st.touches.Load(); w != 1 || !b.st.lastTouch[b.key.ID].Equal(b.now) {
		t.Fatalf("two flushes: %d writes, last use %v; want 1 write of %v", w, b.st.lastTouch[b.key.ID], b.now)
	}
	got, _ := b.st.APIKeyByHash(t.Context(), b.key.Hash)
	if !got.LastUsedAt.Equal(b.now) {
		t.Fatalf("stored last_used_at %v, want %v", got.LastUsedAt, b.now)
	}
}

// An expired key is refused from the moment it expires, though cached.
func TestKeyCacheRefusesAnExpiredKeyAtOnce(t *testing.T) {
	b := setupKeys(t, time.Date(2030, 1, 1, 0, 0, 1, 0, time.UTC))
	if !b.lookup(t) {
		t.Fatal("refused before expiry")
	}
	b.now = b.key.ExpiresAt.Add(-time.Nanosecond)
	if !b.lookup(t) {
		t.Fatal("refused a nanosecond before expiry")
	}
	b.now = b.key.ExpiresAt
	if b.lookup(t) {
		t.Fatal("accepted at its expiry")
	}
	if r := b.st.reads.Load(); r != 1 {
		t.Fatalf("%d store reads: expiry must not wait for the cache to lapse", r)
	}
}

// A revocation told while a read of the key is in flight wins: the read
// (which may predate the revocation) is not cached, so the next request
// reads the store again and is refused.
func TestKeyCacheForgetBeatsAReadInFlight(t *testing.T) {
	b := setupKeys(t, time.Time{})
	b.st.hold, b.st.reading = make(chan struct{}), make(chan struct{}, 1)
	done := make(chan bool)
	go func() {
		_, ok, _ := b.cache.Lookup(context.Background(), b.key.Hash)
		done <- ok
	}()
	<-b.st.reading // the read has begun, and saw the key live
	if _, err := b.st.Store.APIKeyRevoke(t.Context(), "", b.key.ID, b.now); err != nil {
		t.Fatal(err)
	}
	b.cache.Forget(b.key.ID)
	close(b.st.hold)
	<-done
	b.st.reading = nil
	if b.lookup(t) {
		t.Fatal("a key revoked while it was being read was accepted afterwards")
	}
	if r := b.st.reads.Load(); r != 2 {
		t.Fatalf("%d reads, want 2 (the read in flight was cached)", r)
	}
}

// Stop writes what is left, whether or not Start ran.
func TestKeyCacheStopFlushes(t *testing.T) {
	b := setupKeys(t, time.Time{})
	b.lookup(t)
	if err := b.cache.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if w := b.st.touches.Load(); w != 1 {
		t.Fatalf("Stop wrote %d times, want 1", w)
	}
}
