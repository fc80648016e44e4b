// Package subs holds every live subscription in memory with an index from
// event type to subscriptions, so matching an event never scans a table.
// The API keeps it current on every change; ingest and the dispatcher read it.
package subs

import (
	"slices"
	"strings"
	"sync"

	"hookd/internal/core"
)

type Registry struct {
	mu       sync.RWMutex
	byID     map[string]*core.Subscription
	byTenant map[string]*index
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

// Put adds or replaces a subscription. The registry keeps its own copy.
func (r *Registry) Put(s core.Subscription) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byID[s.ID] = &s
	m := r.members(s.TenantID)
	m[s.ID] = &s
	r.rebuild(s.TenantID, m)
}

// Remove forgets a deleted subscription.
func (r *Registry) Remove(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.byID[id]
	if !ok {
		return
	}
	delete(r.byID, id)
	m := r.members(s.TenantID)
	delete(m, id)
	r.rebuild(s.TenantID, m)
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

// Match returns the tenant's subscriptions whose patterns select eventType,
// each once, ordered by ID. Pointers are shared: treat them as read-only.
func (r *Registry) Match(tenantID, eventType string) []*core.Subscription {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ix := r.byTenant[tenantID]
	if ix == nil {
		return nil
	}
	out := append([]*core.Subscription(nil), ix.all...)
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
