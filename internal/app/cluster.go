package app

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"hookd/internal/api"
	"hookd/internal/core"
	"hookd/internal/dispatch"
	"hookd/internal/outage"
	"hookd/internal/store"
	"hookd/internal/subs"
)

const (
	// sharedResync is the dispatcher's safety-net poll on a store several
	// nodes share: another node's notification can be lost in a reconnect.
	sharedResync = 5 * time.Second
	// registryReload is how often the registry is reloaded whatever the
	// notifications said, the registry's safety net.
	registryReload = 10 * time.Second
	// maxWaiting bounds the due notifications kept for subscriptions the
	// registry does not know yet; beyond it the resync finds their work.
	maxWaiting = 10000
)

// cluster keeps a node in step with the others sharing its store: it
// listens for their notifications (new due work, subscription changes,
// shard shares changing) and reloads the subscription registry. It runs
// only on a store several nodes share.
type cluster struct {
	notifier store.Notifier // nil: no notifications, reloads only
	subs     *subs.Service
	reg      *subs.Registry
	dispatch *dispatch.Dispatcher
	log      *slog.Logger
	outage   *outage.Tracker // told of reloads that failed
	// keys forgets API keys other nodes revoked, so this node refuses them.
	keys interface {
		Forget(keyID string)
		ForgetAll()
	}

	reload chan struct{}
	mu     sync.Mutex
	// waiting: subscriptions with due work that the registry did not know
	// when told (created on another node a moment ago); woken after a reload.
	waiting map[string]bool

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startCluster(st store.Store, svc *subs.Service, d *dispatch.Dispatcher, log *slog.Logger, out *outage.Tracker, keys *api.KeyCache) *cluster {
	c := &cluster{subs: svc, reg: svc.Registry(), dispatch: d, log: log, outage: out, keys: keys,
		reload: make(chan struct{}, 1), waiting: map[string]bool{}}
	c.notifier, _ = st.(store.Notifier)
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.reloadLoop(ctx)
	}()
	if c.notifier != nil {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.notifier.Listen(ctx, c.heard)
		}()
	}
	return c
}

func (c *cluster) stop() {
	c.cancel()
	c.wg.Wait()
}

// heard handles one notification from another node. It runs on Listen's
// goroutine, so it only hands work on.
func (c *cluster) heard(d store.Due) {
	switch d.Kind {
	case store.DueSubscription:
		c.kickReload()
	case store.DueLeases:
		c.dispatch.Rebalance()
	case store.DueKeyRevoked:
		c.keys.Forget(d.KeyID)
	case store.DueResumed:
		// Whatever was sent while not listening is lost: catch up.
		c.keys.ForgetAll()
		c.kickReload()
		c.dispatch.Rebalance()
		c.dispatch.Resync()
	case store.DueDeliveries:
		if !c.dispatch.OwnsShard(d.Shard) {
			return // the owner heard it too
		}
		if sub, ok := c.reg.Get(d.SubscriptionID); ok {
			if !c.dispatch.OwnsShard(core.ShardOf(sub.Host)) {
				// Written under a host the subscription has left: the
				// resync moves them to the owner of its current host.
				c.dispatch.Resync()
				return
			}
			c.dispatch.Wake(sub.Host, sub.ID)
			return
		}
		c.mu.Lock()
		if len(c.waiting) < maxWaiting {
			c.waiting[d.SubscriptionID] = true
		}
		c.mu.Unlock()
		c.kickReload()
	}
}

func (c *cluster) kickReload() {
	select {
	case c.reload <- struct{}{}:
	default:
	}
}

func (c *cluster) reloadLoop(ctx context.Context) {
	t := time.NewTicker(registryReload)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.reload:
		}
		c.reloadOnce(ctx)
	}
}

// reloadOnce replaces the registry with the store's subscriptions (keeping
// changes this node made meanwhile), then wakes the subscriptions that had
// due work before the registry knew them.
func (c *cluster) reloadOnce(ctx context.Context) {
	began := time.Now()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	changed, err := c.subs.Reload(rctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			c.outage.Report(c.log, "reloading subscriptions", began, err)
		}
		return
	}
	// Changed on another node: nothing this node queued for them may go
	// out unread (a disable's skipped deliveries would be sent should the
	// subscription be active again by the time its lane is picked).
	c.dispatch.Reloaded(changed)
	c.mu.Lock()
	waiting := c.waiting
	c.waiting = map[string]bool{}
	c.mu.Unlock()
	for id := range waiting {
		if sub, ok := c.reg.Get(id); ok {
			c.dispatch.Wake(sub.Host, sub.ID)
		}
	}
}
