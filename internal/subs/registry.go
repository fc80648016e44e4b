// Package subs holds the live subscriptions and how they change. Registry
// holds them in memory with an index from event type to subscriptions, so
// matching an event never scans a table; ingest and the dispatcher read
// it. Service makes every change (the API's, a disable after a 410) and
// keeps the registry current; with a store other nodes write too, its
// Reload brings in theirs.
package subs

import (
	"reflect"
	"slices"
	"strings"
	"sync"

	"hookd/internal/core"
)

type Registry struct {
	mu       sync.RWMutex
	byID     map[string]*core.Subscription
	byTenant map[string]*index
	// version counts Put and Remove calls; changed holds the version of each
	// ID's latest, so ReplaceAll can tell a local change newer than its
	// snapshot. Both are kept only once Version is called (a registry that
	// is never reloaded has nothing to remember).
	version uint64
	changed map[string]uint64
}

// index is one tenant's patterns: exact names, "prefix." prefixes, and "*".
type index struct {
	subs   map[string]*core.Subscription // by ID
	exact  map[string][]*core.Subscription
	prefix map[string][]*core.Subscription
	all    []*core.Subscription
}

// New builds a registry from the store's live subscriptions.
func New(list []core.Subscription) *Registry {
	r := &Registry{byID: map[string]*core.Subscription{}, byTenant: map[string]*index{}}
	members := map[string]map[string]*core.Subscription{}
	for i := range list {
		s := &list[i]
		r.byID[s.ID] = s
		if members[s.TenantID] == nil {
			members[s.TenantID] = map[string]*core.Subscription{}
		}
		members[s.TenantID][s.ID] = s
	}
	for t, m := range members {
		r.rebuild(t, m)
	}
	return r
}

// Put adds or replaces a subscription, unless the registry holds a newer
// version of it (a later UpdatedAt): two changes whose store writes
// interleave may reach Put in either order. The registry keeps its own copy.
func (r *Registry) Put(s core.Subscription) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.byID[s.ID]; ok && cur.UpdatedAt.After(s.UpdatedAt) {
		return
	}
	r.touch(s.ID)
	r.byID[s.ID] = &s
	m := r.members(s.TenantID)
	m[s.ID] = &s
	r.rebuild(s.TenantID, m)
}

// Remove forgets a deleted subscription.
func (r *Registry) Remove(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.touch(id)
	s, ok := r.byID[id]
	if !ok {
		return
	}
	delete(r.byID, id)
	m := r.members(s.TenantID)
	delete(m, id)
	r.rebuild(s.TenantID, m)
}

func (r *Registry) touch(id string) {
	if r.changed != nil {
		r.version++
		r.changed[id] = r.version
	}
}

// Version marks the local changes (Put, Remove) made so far. Take it just
// before reading the snapshot that is passed to ReplaceAll.
func (r *Registry) Version() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.changed == nil {
		r.changed = map[string]uint64{}
	}
	return r.version
}

// ReplaceAll makes the registry hold list, every live subscription as the
// store had them when read after Version returned since: others appear,
// change or go. A subscription Put or Removed here after since keeps its
// local state: the store wrote it before the registry heard, so it is at
// least as new as the snapshot. Only tenants with a change are reindexed.
// It returns the IDs that changed or went: what another node did to them
// may not show in their state now (a disable and a re-enable in one
// reload's time). Calls must not overlap (one goroutine reloads).
func (r *Registry) ReplaceAll(list []core.Subscription, since uint64) (changed map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	local := func(id string) bool { return r.changed[id] > since }
	changed = map[string]bool{}
	dirty := map[string]bool{} // tenants to reindex
	seen := make(map[string]bool, len(list))
	for i := range list {
		s := &list[i]
		seen[s.ID] = true
		if local(s.ID) {
			continue
		}
		if cur, ok := r.byID[s.ID]; !ok || !reflect.DeepEqual(cur, s) {
			c := *s
			r.byID[s.ID] = &c
			dirty[s.TenantID] = true
			changed[s.ID] = true
		}
	}
	for id, s := range r.byID {
		if !seen[id] && !local(id) {
			delete(r.byID, id)
			dirty[s.TenantID] = true
			changed[id] = true
		}
	}
	for id, v := range r.changed {
		if v <= since { // the snapshot reflects it: forget it
			delete(r.changed, id)
		}
	}
	if len(dirty) == 0 {
		return changed
	}
	members := map[string]map[string]*core.Subscription{}
	for t := range dirty {
		members[t] = map[string]*core.Subscription{}
	}
	for id, s := range r.byID {
		if m := members[s.TenantID]; m != nil {
			m[id] = s
		}
	}
	for t, m := range members {
		r.rebuild(t, m)
	}
	return changed
}

// members returns a copy of one tenant's subscriptions by ID.
func (r *Registry) members(tenantID string) map[string]*core.Subscription {
	m := map[string]*core.Subscription{}
	if ix := r.byTenant[tenantID]; ix != nil {
		for id, s := range ix.subs {
			m[id] = s
		}
	}
	return m
}

// Get returns a subscription. The pointer is shared: treat it as read-only.
func (r *Registry) Get(id string) (*core.Subscription, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.byID[id]
	return s, ok
}

// Count is how many live subscriptions tenantID has.
func (r *Registry) Count(tenantID string) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if ix := r.byTenant[tenantID]; ix != nil {
		return len(ix.subs)
	}
	return 0
}

// Match returns the tenant's subscriptions whose patterns select eventType,
// each once, ordered by ID. Pointers are shared: treat them as read-only.
func (r *Registry) Match(tenantID, eventType string) []*core.Subscription {
	return r.match(tenantID, eventType, true)
}

// MatchNamed is Match without the bare "*" pattern: the subscriptions
// whose patterns name eventType (exactly or by prefix). hookd's own events
// go only to those, so a catch-all endpoint sees nothing it did not ask for.
func (r *Registry) MatchNamed(tenantID, eventType string) []*core.Subscription {
	return r.match(tenantID, eventType, false)
}

func (r *Registry) match(tenantID, eventType string, all bool) []*core.Subscription {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ix := r.byTenant[tenantID]
	if ix == nil {
		return nil
	}
	var out []*core.Subscription
	if all {
		out = append(out, ix.all...)
	}
	out = append(out, ix.exact[eventType]...)
	// Every "prefix." that eventType starts with: one lookup per dot.
	for i := 0; i < len(eventType); i++ {
		if eventType[i] == '.' {
			out = append(out, ix.prefix[eventType[:i+1]]...)
		}
	}
	slices.SortFunc(out, func(a, b *core.Subscription) int { return strings.Compare(a.ID, b.ID) })
	return slices.CompactFunc(out, func(a, b *core.Subscription) bool { return a.ID == b.ID })
}

// rebuild recomputes one tenant's index. Subscription changes are rare next
// to events, so a rebuild per change keeps the read path simple.
func (r *Registry) rebuild(tenantID string, members map[string]*core.Subscription) {
	if len(members) == 0 {
		delete(r.byTenant, tenantID)
		return
	}
	ix := &index{subs: members, exact: map[string][]*core.Subscription{}, prefix: map[string][]*core.Subscription{}}
	for _, s := range members {
		for _, p := range s.EventTypes {
			switch {
			case p == "*":
				ix.all = append(ix.all, s)
			case strings.HasSuffix(p, ".*"):
				k := strings.TrimSuffix(p, "*")
				ix.prefix[k] = append(ix.prefix[k], s)
			default:
				ix.exact[p] = append(ix.exact[p], s)
			}
		}
	}
	r.byTenant[tenantID] = ix
}
