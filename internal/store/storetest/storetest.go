// Package storetest is the conformance suite every store.Store backend must
// pass. A backend's test calls Run with a function that opens a fresh, empty
// (migrated) store.
//
// Times in fixtures carry microsecond precision, the finest every backend
// keeps (PostgreSQL timestamptz); stores must return them equal under
// time.Equal. Payloads must round-trip byte for byte (they are signed).
package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// Run runs every conformance test as a subtest of t. The subtests run in
// parallel, each on its own store: open is called concurrently and must
// return an empty, migrated store that no other subtest sees.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Tenants", testTenants},
		{"APIKeys", testAPIKeys},
		{"AuditInTransaction", testAuditInTransaction},
		{"AuditList", testAuditList},
		{"SubscriptionCRUD", testSubscriptionCRUD},
		{"SubscriptionCreateWithin", testSubscriptionCreateWithin},
		{"SubscriptionRoundTrip", testSubscriptionRoundTrip},
		{"SubscriptionListPaging", testSubscriptionListPaging},
		{"SubscriptionDeleteSkipsPending", testSubscriptionDeleteSkipsPending},
		{"SubscriptionDisableSkipsPending", testSubscriptionDisableSkipsPending},
		{"SubscriptionHostChangeMovesPending", testSubscriptionHostChangeMovesPending},
		{"IdempotentIngest", testIdempotentIngest},
		{"OutboxAllOrNothing", testOutboxAllOrNothing},
		{"OrderedSequence", testOrderedSequence},
		{"IngestDecidesAtCommit", testIngestDecidesAtCommit},
		{"EventGet", testEventGet},
		{"DeliveryDue", testDeliveryDue},
		{"DeliveryPendingSubscriptions", testDeliveryPendingSubscriptions},
		{"OrderedLines", testOrderedLines},
		{"OrderedLongLines", testOrderedLongLines},
		{"DueMatchesOneWalk", testDueMatchesOneWalk},
		{"DeliveryStats", testDeliveryStats},
		{"DeliveryPendingCounts", testDeliveryPendingCounts},
		{"DeliveryExpire", testDeliveryExpire},
		{"DeliveryRehost", testDeliveryRehost},
		{"Purge", testPurge},
		{"PurgeConcurrent", testPurgeConcurrent},
		{"DeliveryBuckets", testDeliveryBuckets},
		{"DeliveryBucketsFarTimes", testDeliveryBucketsFarTimes},
		{"DeliveryBucketsSampled", testDeliveryBucketsSampled},
		{"ReplayJobs", testReplayJobs},
		{"ReplayJobStates", testReplayJobStates},
		{"ReplayJobCancel", testReplayJobCancel},
		{"ReplayJobCancelRacesSteps", testReplayJobCancelRacesSteps},
		{"ReplayJobList", testReplayJobList},
		{"ReplayJobOneRunning", testReplayJobOneRunning},
		{"DeliveryUntried", testDeliveryUntried},
		{"DeliveryRecordResults", testDeliveryRecordResults},
		{"DeliveryRecordResultsOvertaken", testDeliveryRecordResultsOvertaken},
		{"Failing", testFailing},
		{"FailingRestartsWhenTurnedOn", testFailingRestartsWhenTurnedOn},
		{"Notices", testNotices},
		{"LastFailure", testLastFailure},
		{"FailingListAndTenants", testFailingListAndTenants},
		{"Logs", testLogs},
		{"PortalLinks", testPortalLinks},
		{"DeliveryReplay", testDeliveryReplay},
		{"DeliveryList", testDeliveryList},
		{"ConcurrentIngest", testConcurrentIngest},
		{"FarTimes", testFarTimes},
		{"Health", testHealth},
		{"TenantsAsApplications", testTenantsAsApplications},
		{"SubscriptionSvixFields", testSubscriptionSvixFields},
		{"EventList", testEventList},
		{"AttemptList", testAttemptList},
		{"EventTypes", testEventTypes},
		{"Circuits", testCircuits},
		{"Shed", testShed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			t.Cleanup(func() { s.Close() })
			tc.fn(t, s)
		})
	}
}

// t0 is the suite's reference instant; fixtures are placed relative to it.
var t0 = time.Date(2030, 5, 6, 7, 8, 9, 123456000, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// fx builds fixtures against one store.
type fx struct {
	t   *testing.T
	s   store.Store
	ctx context.Context
}

func newFx(t *testing.T, s store.Store) *fx { return &fx{t: t, s: s, ctx: t.Context()} }

func hashKey(plain string) string {
	h := sha256.Sum256([]byte(plain))
	return hex.EncodeToString(h[:])
}

// tenant creates a tenant with one API key and returns it.
func (f *fx) tenant() core.Tenant {
	f.t.Helper()
	tn := core.Tenant{ID: core.NewID("ten"), Name: "acme", CreatedAt: t0}
	key := core.APIKey{ID: core.NewID("key"), TenantID: tn.ID, Hash: hashKey(tn.ID), CreatedAt: t0}
	if err := f.s.TenantCreate(f.ctx, tn, key); err != nil {
		f.t.Fatalf("TenantCreate: %v", err)
	}
	return tn
}

// sub creates an active subscription on host for tenant, after applying opts.
func (f *fx) sub(tenant, host string, opts ...func(*core.Subscription)) core.Subscription {
	f.t.Helper()
	s := core.Subscription{
		ID: core.NewID("sub"), TenantID: tenant, URL: "https://" + host + "/hook", Host: host,
		EventTypes: []string{"*"}, Secret: "whsec_c2VjcmV0", State: core.SubActive,
		CreatedAt: t0, UpdatedAt: t0,
	}
	for _, o := range opts {
		o(&s)
	}
	if err := f.s.SubscriptionCreate(f.ctx, s); err != nil {
		f.t.Fatalf("SubscriptionCreate: %v", err)
	}
	return s
}

func ordered(s *core.Subscription) { s.Ordered = true }

// ev returns an unsaved event of tenant.
func ev(tenant, typ string, opts ...func(*core.Event)) core.Event {
	e := core.Event{ID: core.NewID("evt"), TenantID: tenant, Type: typ,
		Payload: []byte(`{"amount":1200,"note":"caf\u00e9"}`), CreatedAt: t0}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func key(k string) func(*core.Event)      { return func(e *core.Event) { e.IdempotencyKey = k } }
func orderKey(k string) func(*core.Event) { return func(e *core.Event) { e.OrderingKey = k } }

// dlv returns an unsaved pending delivery of e to sub, due at next.
func dlv(e core.Event, sub core.Subscription, next time.Time) core.Delivery {
	return core.Delivery{
		ID: core.NewID("dlv"), EventID: e.ID, SubscriptionID: sub.ID, TenantID: e.TenantID,
		EventType: e.Type, Host: sub.Host, Shard: core.ShardOf(sub.Host), State: core.DeliveryPending,
		NextAttemptAt: next, CreatedAt: e.CreatedAt, UpdatedAt: e.CreatedAt, OrderingKey: e.OrderingKey,
	}
}

// item pairs e with one delivery per sub, all due at next.
func item(e core.Event, next time.Time, subs ...core.Subscription) store.EventInsert {
	in := store.EventInsert{Event: e}
	for _, s := range subs {
		in.Deliveries = append(in.Deliveries, dlv(e, s, next))
	}
	return in
}

// insert writes a batch and fails the test on error.
func (f *fx) insert(batch ...store.EventInsert) []store.EventInsertResult {
	f.t.Helper()
	res, err := f.s.EventInsertBatch(f.ctx, batch)
	if err != nil {
		f.t.Fatalf("EventInsertBatch: %v", err)
	}
	if len(res) != len(batch) {
		f.t.Fatalf("EventInsertBatch: %d results for %d items", len(res), len(batch))
	}
	return res
}

// deliver inserts one event with a pending delivery to sub due at next.
func (f *fx) deliver(sub core.Subscription, next time.Time) core.Delivery {
	f.t.Helper()
	return f.insert(item(ev(sub.TenantID, "payment.succeeded"), next, sub))[0].Deliveries[0]
}

func (f *fx) getDelivery(id string) (core.Delivery, []core.Attempt) {
	f.t.Helper()
	d, as, err := f.s.DeliveryGet(f.ctx, "", id)
	if err != nil {
		f.t.Fatalf("DeliveryGet(%s): %v", id, err)
	}
	// RoundStartedAt is DeliveryGet's alone (lists and jobs leave it
	// zero): checked here, left out of the comparisons.
	if d.RoundStartedAt.IsZero() || d.RoundStartedAt.Before(d.CreatedAt) {
		f.t.Fatalf("DeliveryGet(%s): round started at %v, before its creation %v", id, d.RoundStartedAt, d.CreatedAt)
	}
	d.RoundStartedAt = time.Time{}
	return d, as
}

func (f *fx) state(id string) core.DeliveryState {
	f.t.Helper()
	d, _ := f.getDelivery(id)
	return d.State
}

// record writes one attempt result.
func (f *fx) record(d core.Delivery, n, status int, state core.DeliveryState, next time.Time) {
	f.t.Helper()
	err := f.s.DeliveryRecordResults(f.ctx, []store.AttemptResult{{
		Attempt: core.Attempt{DeliveryID: d.ID, N: n, StartedAt: at(time.Duration(n) * time.Second),
			Duration: 15 * time.Millisecond, StatusCode: status},
		State: state, NextAttemptAt: next, Now: at(time.Duration(n) * time.Second),
	}})
	if err != nil {
		f.t.Fatalf("DeliveryRecordResults: %v", err)
	}
}

// all lists every delivery of a subscription, newest first.
func (f *fx) all(subID string) []core.Delivery {
	f.t.Helper()
	var out []core.Delivery
	p := store.DeliveryListParams{SubscriptionID: subID, Limit: 100}
	for {
		page, err := f.s.DeliveryList(f.ctx, p)
		if err != nil {
			f.t.Fatalf("DeliveryList: %v", err)
		}
		out = append(out, page.Data...)
		if page.NextCursor == "" {
			return out
		}
		p.Cursor = page.NextCursor
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

func noErr(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// norm makes times comparable with reflect.DeepEqual: UTC, no monotonic reading.
func norm(v any) any {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return v
	}
	out := reflect.New(rv.Type()).Elem()
	out.Set(rv)
	normValue(out)
	return out.Interface()
}

var timeType = reflect.TypeOf(time.Time{})

func normValue(v reflect.Value) {
	switch {
	case v.Type() == timeType:
		t := v.Interface().(time.Time)
		if !t.IsZero() {
			v.Set(reflect.ValueOf(t.Round(0).UTC()))
		} else {
			v.Set(reflect.ValueOf(time.Time{}))
		}
	case v.Kind() == reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Field(i).CanSet() {
				normValue(v.Field(i))
			}
		}
	case v.Kind() == reflect.Slice:
		if v.IsNil() {
			return
		}
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(c, v)
		for i := 0; i < c.Len(); i++ {
			normValue(c.Index(i))
		}
		v.Set(c)
	}
}

// same fails the test unless got and want are equal, times compared as instants.
func same(t *testing.T, what string, got, want any) {
	t.Helper()
	g, w := norm(got), norm(want)
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s:\n got  %s\n want %s", what, show(g), show(w))
	}
}

func show(v any) string { return fmt.Sprintf("%+v", v) }

func ids[T any](xs []T, id func(T) string) []string {
	var out []string // nil when empty, to compare with an empty want
	for _, x := range xs {
		out = append(out, id(x))
	}
	return out
}

func dlvID(d core.Delivery) string     { return d.ID }
func subID(s core.Subscription) string { return s.ID }
func jobID(j core.Job) string          { return j.Delivery.ID }
