package subs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"hookd/internal/audit"
	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/webhook"
)

// writeTimeout bounds a change's write once begun. The write does not end
// with its caller (a client hanging up), so store and registry agree; the
// store's own follow-up (skipping a backlog) is bounded by the store.
const writeTimeout = 30 * time.Second

// Service makes every change to a subscription, in one order: the store,
// then the registry, then the dispatcher's wake-up. The registry never
// shows what the store has not committed, and where it is behind the store
// (between the two, or another node's change not yet reloaded) the store
// decides at commit what ingest writes (EventInsertBatch). If the store
// write fails, the registry is left as it was.
//
// Changes to one subscription on this node take turns: a lock per ID, held
// across the store call. Never one lock for all: a disable can take minutes
// while the store skips a large backlog.
//
// Every change is audited here, the one place that knows what changed: the
// entry (actor and address from ctx, see audit.WithActor; hookd itself
// when none) goes to the store with the change and commits with it.
type Service struct {
	store store.Store
	reg   *Registry
	wake  func(host, subscriptionID string)
	locks idLocks
	// reloading keeps reloads apart (ReplaceAll's calls must not overlap);
	// no change waits on it.
	reloading sync.Mutex
}

// NewService keeps reg in step with st. wake (nil: none) is told when a
// subscription may have held deliveries to send now; it is called only
// after a change, so it may refer to a dispatcher built later.
func NewService(st store.Store, reg *Registry, wake func(host, subscriptionID string)) *Service {
	return &Service{store: st, reg: reg, wake: wake}
}

// Registry is the index the service keeps; read it, never change it.
func (v *Service) Registry() *Registry { return v.reg }

// Create stores s, made whole by the caller (ID, tenant, secret, times),
// then adds it to the registry. store.ErrConflict if its ID exists.
func (v *Service) Create(ctx context.Context, s core.Subscription) error {
	return v.CreateWithin(ctx, s, 0)
}

// CreateWithin is Create within a limit of max live subscriptions for
// s's tenant (0: none), which the store checks in the create's own
// transaction (store.SubscriptionCreateWithin): store.ErrLimit over it.
func (v *Service) CreateWithin(ctx context.Context, s core.Subscription, max int) error {
	unlock, err := v.locks.lock(ctx, s.ID)
	if err != nil {
		return err
	}
	defer unlock()
	wctx, cancel := detach(ctx)
	defer cancel()
	wctx = audit.Record(wctx, audit.SubscriptionCreate, s.ID, map[string]any{"host": s.Host, "event_types": s.EventTypes})
	if err := v.store.SubscriptionCreateWithin(wctx, s, max); err != nil {
		return fmt.Errorf("creating subscription: %w", err)
	}
	v.reg.Put(s)
	return nil
}

// Update applies mutate to the stored subscription (of tenantID; "" any)
// and writes the result with UpdatedAt now. ID, tenant and CreatedAt stay.
// It wakes the dispatcher when the subscription became active, or moved
// host while active: its held deliveries may go now; and when it stopped
// being active, so that nothing queued goes out. It returns the
// subscription as written. An error from mutate is returned as is, and
// nothing is written. store.ErrNotFound if absent, deleted or another
// tenant's.
func (v *Service) Update(ctx context.Context, tenantID, id string, mutate func(*core.Subscription) error) (core.Subscription, error) {
	return v.update(ctx, tenantID, id, "", mutate)
}

// update is Update, audited as action ("": by the change of state, see
// updateAction).
func (v *Service) update(ctx context.Context, tenantID, id, action string, mutate func(*core.Subscription) error) (core.Subscription, error) {
	return v.write(ctx, tenantID, id, action, mutate, v.store.SubscriptionUpdate)
}

// write is update, writing the result with put (the store's
// SubscriptionUpdate, or a variant of it).
func (v *Service) write(ctx context.Context, tenantID, id, action string, mutate func(*core.Subscription) error,
	put func(context.Context, core.Subscription) error) (core.Subscription, error) {
	unlock, err := v.locks.lock(ctx, id)
	if err != nil {
		return core.Subscription{}, err
	}
	defer unlock()
	cur, err := v.store.SubscriptionGet(ctx, tenantID, id)
	if err != nil {
		return core.Subscription{}, fmt.Errorf("reading subscription: %w", err)
	}
	next := cur
	if err := mutate(&next); err != nil {
		return core.Subscription{}, err
	}
	next.ID, next.TenantID, next.CreatedAt = cur.ID, cur.TenantID, cur.CreatedAt
	// Later than what it replaces, even if the clock stepped back: the
	// registry keeps the newer of two versions.
	next.UpdatedAt = time.Now().UTC()
	if !next.UpdatedAt.After(cur.UpdatedAt) {
		next.UpdatedAt = cur.UpdatedAt.Add(time.Microsecond)
	}
	wctx, cancel := detach(ctx)
	defer cancel()
	if action == "" {
		action = updateAction(cur.State, next.State)
	}
	wctx = audit.Record(wctx, action, id, updateDetail(cur, next))
	if err := put(wctx, next); err != nil {
		return core.Subscription{}, fmt.Errorf("updating subscription: %w", err)
	}
	v.reg.Put(next)
	// Woken on leaving active too: the dispatcher then forgets what it
	// queued, which this write skipped (disabled) or holds (paused).
	// A new URL is a new endpoint (on the same host too): what the old
	// one's circuit held may go now.
	if v.wake != nil && (next.State == core.SubActive && (cur.State != core.SubActive || cur.Host != next.Host || cur.URL != next.URL) ||
		cur.State == core.SubActive && next.State != core.SubActive) {
		v.wake(next.Host, next.ID)
	}
	return next, nil
}

// errUnchanged tells change's callers that mutate found nothing to do.
var errUnchanged = errors.New("unchanged")

// Disable turns a subscription off for reason (its endpoint answered 410,
// or every attempt failed for days): the store skips its pending
// deliveries, then the registry stops matching it as active. It reports
// whether it changed anything: nothing if the subscription is already
// disabled or gone. Errors are the store's.
func (v *Service) Disable(ctx context.Context, id, reason string) (bool, error) {
	_, changed, err := v.DisableWithNotice(ctx, id, reason, nil)
	return changed, err
}

// DisableWithNotice is Disable recording, in the same store write, the
// hookd.subscription.disabled its owner is owed: notice (nil: none) makes
// its payload from the subscription as written (see
// store.SubscriptionDisable). It also returns the subscription as
// written. Errors are notice's and the store's.
func (v *Service) DisableWithNotice(ctx context.Context, id, reason string, notice func(core.Subscription) ([]byte, error)) (core.Subscription, bool, error) {
	put := v.store.SubscriptionUpdate
	if notice != nil {
		put = func(ctx context.Context, s core.Subscription) error {
			payload, err := notice(s)
			if err != nil {
				return fmt.Errorf("the disabled notice: %w", err)
			}
			return v.store.SubscriptionDisable(ctx, s, payload)
		}
	}
	sub, err := v.write(ctx, "", id, "", func(s *core.Subscription) error {
		if s.State == core.SubDisabled {
			return errUnchanged
		}
		s.State, s.DisabledReason = core.SubDisabled, reason
		return nil
	}, put)
	if errors.Is(err, errUnchanged) || errors.Is(err, store.ErrNotFound) {
		return core.Subscription{}, false, nil
	}
	return sub, err == nil, err
}

// Delete marks a subscription deleted (the store skips its pending
// deliveries), then removes it from the registry. store.ErrNotFound if
// absent, already deleted or another tenant's (tenantID "" any).
func (v *Service) Delete(ctx context.Context, tenantID, id string) error {
	unlock, err := v.locks.lock(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	wctx, cancel := detach(ctx)
	defer cancel()
	wctx = audit.Record(wctx, audit.SubscriptionDelete, id, nil)
	if err := v.store.SubscriptionDelete(wctx, tenantID, id, time.Now().UTC()); err != nil {
		return fmt.Errorf("deleting subscription: %w", err)
	}
	v.reg.Remove(id)
	return nil
}

// Rotate gives a subscription a new secret; the previous one keeps signing
// for core.SecretGracePeriod, so receivers can switch without missing a
// delivery. It returns the subscription as written (Secret is the new
// one). Errors as Update's.
func (v *Service) Rotate(ctx context.Context, tenantID, id string) (core.Subscription, error) {
	return v.RotateTo(ctx, tenantID, id, "")
}

// RotateTo is Rotate to the given secret ("": a new one), which the
// caller has checked is a whsec_ secret.
func (v *Service) RotateTo(ctx context.Context, tenantID, id, secret string) (core.Subscription, error) {
	return v.update(ctx, tenantID, id, audit.SubscriptionRotateSecret, func(s *core.Subscription) error {
		if secret == "" {
			var err error
			if secret, err = webhook.NewSecret(); err != nil {
				return fmt.Errorf("new secret: %w", err)
			}
		}
		s.PrevSecret, s.PrevSecretExpiresAt = s.Secret, time.Now().UTC().Add(core.SecretGracePeriod)
		s.Secret = secret
		return nil
	})
}

// Reload makes the registry hold the store's live subscriptions, keeping
// any change made through this service while they were read (its write
// came first, so it is at least as new). It brings in other nodes' changes
// on a store they share, and returns the IDs they changed or removed.
// Errors are the store's.
func (v *Service) Reload(ctx context.Context) (changed map[string]bool, err error) {
	v.reloading.Lock()
	defer v.reloading.Unlock()
	since := v.reg.Version()
	list, err := v.store.SubscriptionListAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing subscriptions: %w", err)
	}
	return v.reg.ReplaceAll(list, since), nil
}

// updateAction names a change by what it did to the state: pause, resume
// (to active), disable, or a plain update when the state stayed.
func updateAction(from, to core.SubscriptionState) string {
	switch {
	case from == to:
		return audit.SubscriptionUpdate
	case to == core.SubPaused:
		return audit.SubscriptionPause
	case to == core.SubDisabled:
		return audit.SubscriptionDisable
	}
	return audit.SubscriptionResume
}

// updateDetail says what a change changed: field names (never their
// values: a URL's path or a secret may be a credential), the state moved
// and why it was disabled.
func updateDetail(cur, next core.Subscription) map[string]any {
	d := map[string]any{"changed": audit.Changed(cur, next, "UpdatedAt")}
	if cur.State != next.State {
		d["state"] = map[string]any{"from": cur.State, "to": next.State}
	}
	if next.State == core.SubDisabled && next.DisabledReason != "" {
		d["disabled_reason"] = next.DisabledReason
	}
	return d
}

// detach gives a write that outlives its caller, within writeTimeout.
func detach(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
}

// idLocks holds one lock per subscription ID, kept while someone holds or
// waits for it.
type idLocks struct {
	mu sync.Mutex
	m  map[string]*idLock
}

type idLock struct {
	held chan struct{} // one token while held
	refs int           // holders and waiters; guarded by idLocks.mu
}

// lock waits for id's lock until ctx ends, and returns its unlock.
func (l *idLocks) lock(ctx context.Context, id string) (func(), error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*idLock{}
	}
	e := l.m[id]
	if e == nil {
		e = &idLock{held: make(chan struct{}, 1)}
		l.m[id] = e
	}
	e.refs++
	l.mu.Unlock()
	drop := func() {
		l.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(l.m, id)
		}
		l.mu.Unlock()
	}
	select {
	case e.held <- struct{}{}:
		return func() { <-e.held; drop() }, nil
	case <-ctx.Done():
		drop()
		return nil, ctx.Err()
	}
}
