// Package audit names the changes hookd records in its audit log, and
// carries in a context who is making a change and the entry the store
// writes with it, in the change's own transaction (so a committed change
// always has its row, and a failed one none).
package audit

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"

	"hookd/internal/core"
)

// Actors other than a tenant key (which acts under its own key ID).
const (
	ActorAdmin  = "admin"  // the admin token
	ActorHookd  = "hookd"  // hookd itself, e.g. disabling after a 410
	ActorPortal = "portal" // a portal link's holder, exchanging it for a session
)

// Actions, as stored and as filtered on in GET /v1/audit.
const (
	TenantCreate             = "tenant.create"
	TenantUpdate             = "tenant.update" // an application's fields, through the Svix-compatible API
	TenantDelete             = "tenant.delete"
	KeyCreate                = "key.create"
	KeyRevoke                = "key.revoke"
	SubscriptionCreate       = "subscription.create"
	SubscriptionUpdate       = "subscription.update"
	SubscriptionPause        = "subscription.pause"
	SubscriptionResume       = "subscription.resume"
	SubscriptionDisable      = "subscription.disable"
	SubscriptionDelete       = "subscription.delete"
	SubscriptionRotateSecret = "subscription.rotate_secret"
	SubscriptionTest         = "subscription.test" // a test event sent to it
	ReplayDelivery           = "replay.delivery"
	ReplaySubscription       = "replay.subscription"
	ReplayCancel             = "replay.cancel"
	PortalLink               = "portal.link"    // a portal link made
	PortalSession            = "portal.session" // a portal link exchanged for a session key
)

// Actions is every action there is.
var Actions = []string{
	TenantCreate, TenantUpdate, TenantDelete, KeyCreate, KeyRevoke,
	SubscriptionCreate, SubscriptionUpdate, SubscriptionPause, SubscriptionResume,
	SubscriptionDisable, SubscriptionDelete, SubscriptionRotateSecret, SubscriptionTest,
	ReplayDelivery, ReplaySubscription, ReplayCancel,
	PortalLink, PortalSession,
}

// Known reports whether action is one of Actions.
func Known(action string) bool { return slices.Contains(Actions, action) }

// Actor is who makes a change, and from which address.
type Actor struct {
	ID   string // ActorAdmin, a tenant key's ID, or ActorHookd
	Addr string // the request's RemoteAddr; "" for hookd's own changes
}

type actorKey struct{}

type entryKey struct{}

// WithActor returns ctx naming who acts in it (the API sets it per request).
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorOf is who acts in ctx: hookd itself when no request named anyone.
func ActorOf(ctx context.Context) Actor {
	if a, ok := ctx.Value(actorKey{}).(Actor); ok && a.ID != "" {
		return a
	}
	return Actor{ID: ActorHookd}
}

// Record returns ctx carrying the entry for one change: action on target,
// by ctx's actor, now, with detail (nil: {}). Detail must hold names and
// states only, never a secret, header value or key. The store method that
// makes the change writes the entry in the same transaction, under the
// tenant of the row it changed; pass the returned context to that one call.
func Record(ctx context.Context, action, target string, detail map[string]any) context.Context {
	a := ActorOf(ctx)
	d := []byte("{}")
	if len(detail) > 0 {
		if b, err := json.Marshal(detail); err == nil {
			d = b
		}
	}
	return context.WithValue(ctx, entryKey{}, core.AuditEntry{
		ID: core.NewID("aud"), At: time.Now().UTC(), Actor: a.ID, RemoteAddr: a.Addr,
		Action: action, TargetID: target, Detail: d,
	})
}

// Entry is the entry ctx carries for the store to write, if any.
func Entry(ctx context.Context) (core.AuditEntry, bool) {
	e, ok := ctx.Value(entryKey{}).(core.AuditEntry)
	return e, ok
}

// Changed lists, in snake_case, the fields of two values of one struct
// type that differ, leaving out the fields named in skip (Go names). It
// reads the fields by reflection so a field added to the type later is
// listed too, rather than missing from the log.
func Changed(before, after any, skip ...string) []string {
	b, a := reflect.ValueOf(before), reflect.ValueOf(after)
	out := []string{}
	for i := range b.NumField() {
		f := b.Type().Field(i)
		if !f.IsExported() || slices.Contains(skip, f.Name) {
			continue
		}
		if !reflect.DeepEqual(b.Field(i).Interface(), a.Field(i).Interface()) {
			out = append(out, snake(f.Name))
		}
	}
	return out
}

// snake turns a Go field name into the API's spelling: PrevSecretExpiresAt
// is prev_secret_expires_at, URL is url, TenantID is tenant_id.
func snake(name string) string {
	rs := []rune(name)
	var b strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 &&
			(unicode.IsLower(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]))) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}
