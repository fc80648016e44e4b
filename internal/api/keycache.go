package api

import (
	"context"
	"errors"
	"fmt"
	"hookd/internal/outage"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

const (
	// KeyCacheTTL is how long a key read from the store is trusted before
	// it is read again: the safety net behind revocation notices, which a
	// node misses while its LISTEN connection is dead and not yet noticed.
	// So a revoked key is refused at once on the node that revoked it,
	// within a notification round trip on the others, and within this long
	// at worst.
	KeyCacheTTL = 5 * time.Second
	// keyTouchEvery is how often the last uses of keys are written: at most
	// one write per key per node in this time, off the request path.
	keyTouchEvery = time.Minute
)

// KeyCache says which tenant key a bearer token is without a store read on
// every request, refuses revoked and expired keys at once, and records when
// keys are used. Everything below mu is guarded by it.
type KeyCache struct {
	store store.Store
	log   *slog.Logger
	now   func() time.Time
	// Outage is told of a last-use write failed in an outage, which it
	// logs once for the node (nil: each is logged). Set before Start.
	Outage *outage.Tracker

	mu   sync.Mutex
	keys map[string]cachedKey // by hash: live keys as read from the store
	// gen counts Forget calls: a read that began before one is not cached,
	// since it may predate the revocation it was told of.
	gen  uint64
	used map[string]time.Time // key ID → last use not yet written

	started  atomic.Bool
	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

type cachedKey struct {
	key  core.APIKey
	read time.Time
}

// NewKeyCache reads keys from st. Start begins writing last uses.
func NewKeyCache(st store.Store, log *slog.Logger) *KeyCache {
	if log == nil {
		log = slog.Default()
	}
	return &KeyCache{store: st, log: log, now: time.Now,
		keys: map[string]cachedKey{}, used: map[string]time.Time{},
		stop: make(chan struct{}), done: make(chan struct{})}
}

// Lookup returns the key whose hash is hash, and whether it may be used
// now: false if there is none, or it is revoked or expired. A use is noted
// for the next write of last uses.
func (c *KeyCache) Lookup(ctx context.Context, hash string) (core.APIKey, bool, error) {
	now := c.now()
	c.mu.Lock()
	e, ok := c.keys[hash]
	gen := c.gen
	c.mu.Unlock()
	if !ok || now.Sub(e.read) >= KeyCacheTTL {
		k, err := c.store.APIKeyByHash(ctx, hash)
		if errors.Is(err, store.ErrNotFound) {
			return core.APIKey{}, false, nil
		}
		if err != nil {
			return core.APIKey{}, false, fmt.Errorf("reading API key: %w", err)
		}
		e = cachedKey{key: k, read: now}
	}
	live := e.key.Live(now)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !live:
		delete(c.keys, hash)
		return core.APIKey{}, false, nil
	case c.gen == gen:
		c.keys[hash] = e
	}
	c.used[e.key.ID] = now
	return e.key, true, nil
}

// Forget drops a key (revoked here or on another node) so its next use
// reads the store.
func (c *KeyCache) Forget(keyID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h, e := range c.keys {
		if e.key.ID == keyID {
			delete(c.keys, h)
		}
	}
	c.gen++
}

// ForgetAll drops every key: revocation notices may have been missed.
func (c *KeyCache) ForgetAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.keys)
	c.gen++
}

// Flush writes the last uses noted since the previous write. On failure
// they are kept for the next one.
func (c *KeyCache) Flush(ctx context.Context) error {
	c.mu.Lock()
	used := c.used
	c.used = map[string]time.Time{}
	c.mu.Unlock()
	if len(used) == 0 {
		return nil
	}
	if err := c.store.APIKeysTouch(ctx, used); err != nil {
		c.mu.Lock()
		for id, at := range used {
			if at.After(c.used[id]) {
				c.used[id] = at
			}
		}
		c.mu.Unlock()
		return fmt.Errorf("writing API keys' last use: %w", err)
	}
	return nil
}

// Start writes last uses every keyTouchEvery until Stop.
func (c *KeyCache) Start() {
	c.started.Store(true)
	go func() {
		defer close(c.done)
		t := time.NewTicker(keyTouchEvery)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
				began := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if err := c.Flush(ctx); err != nil {
					c.Outage.Report(c.log, "recording API key use", began, err)
				}
				cancel()
			}
		}
	}()
}

// Stop ends Start's loop (if started) and writes the last uses left.
func (c *KeyCache) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() { close(c.stop) })
	if c.started.Load() {
		select {
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return c.Flush(ctx)
}
