// Package store defines the one interface every storage backend implements.
// Backends live in sqlite/ and postgres/; storetest/ is the conformance
// suite each of them must pass. Methods are named table first.
package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"hookd/internal/core"
)

var (
	// ErrNotFound: no such row, or it belongs to another tenant.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a row with that identity already exists, or the row is in
	// a state that does not allow the change.
	ErrConflict = errors.New("conflict")
	// ErrUnavailable: the database cannot take the call now (it cannot be
	// reached, a connection was lost or refused, no connection came within
	// the deadline, the server is shutting down). Nothing was written; the
	// same call may succeed later. Any method may return it.
	ErrUnavailable = errors.New("store unavailable")
	// ErrFull: the database has no room to write (SQLite SQLITE_FULL,
	// PostgreSQL disk_full). Nothing was written; reads may still work.
	// Any writing method may return it.
	ErrFull = errors.New("store full")
	// ErrDisabled: the change would put a delivery back in line for a
	// disabled subscription, which sends nothing. It is an ErrConflict.
	ErrDisabled = fmt.Errorf("%w: the subscription is disabled", ErrConflict)
	// ErrInvalidCursor: a list's cursor is not one the store made.
	ErrInvalidCursor = errors.New("invalid cursor")
	// ErrLimit: the write would take its tenant past a limit it was given;
	// nothing was written.
	ErrLimit = errors.New("over a limit")
)

// Store is everything the API and the dispatcher need from storage. Every
// method is safe for concurrent use. A tenantID of "" means any tenant (admin).
//
// The audit log: TenantCreate, TenantUpdate, TenantDelete, APIKeyCreate, APIKeyRevoke,
// SubscriptionCreate, SubscriptionUpdate, SubscriptionDisable, SubscriptionDelete,
// SubscriptionTested,
// DeliveryReplay, ReplayJobCreate, ReplayJobCancel, PortalLinkCreate and
// PortalLinkRedeem write the entry their context carries
// (audit.Record) in the change's own transaction, with TenantID set to the
// tenant of the row changed: no change commits without its entry, and a
// change that fails writes none.
type Store interface {
	Close() error

	// TenantCreate inserts a tenant and its first API key in one transaction.
	// ErrConflict if the tenant ID exists.
	TenantCreate(ctx context.Context, t core.Tenant, key core.APIKey) error
	// TenantGet: ErrNotFound if absent.
	TenantGet(ctx context.Context, id string) (core.Tenant, error)
	// APIKeyByHash finds a key by the hex SHA-256 of its plaintext, revoked
	// and expired ones too (the caller checks Live). ErrNotFound if absent.
	APIKeyByHash(ctx context.Context, hash string) (core.APIKey, error)
	// APIKeyCreate inserts a key of an existing tenant. ErrNotFound if the
	// tenant is absent; ErrConflict if the ID or the hash exists.
	APIKeyCreate(ctx context.Context, key core.APIKey) error
	// APIKeyList pages one tenant's keys, revoked and expired ones
	// included, by ID ascending.
	APIKeyList(ctx context.Context, p APIKeyListParams) (Page[core.APIKey], error)
	// APIKeyRevoke marks a key revoked at now and returns it as written. On
	// a store several nodes share it tells them at commit (DueKeyRevoked),
	// so they stop accepting it. ErrNotFound if absent or another tenant's
	// (tenantID "" any); ErrConflict if already revoked.
	APIKeyRevoke(ctx context.Context, tenantID, id string, now time.Time) (core.APIKey, error)
	// APIKeysTouch records when keys were last used (by key ID): each
	// last_used_at becomes the later of its value and the time given.
	// Unknown IDs are ignored.
	APIKeysTouch(ctx context.Context, used map[string]time.Time) error
	// PortalLinkCreate inserts a portal link of an existing tenant (and
	// drops the tenant's links that expired over a day ago). ErrNotFound if
	// the tenant is absent.
	PortalLinkCreate(ctx context.Context, l core.PortalLink) error
	// PortalLinkRedeem exchanges the link whose token hashes to hash for
	// key, in ONE transaction: only if the link is unused and unexpired at
	// now, it is marked used and key inserted for its tenant, scoped
	// ScopePortal, expiring with the link. The store decides, so a second
	// use fails on any node. Returns the key as written; ErrNotFound if
	// there is no such link, or it was used or has expired.
	PortalLinkRedeem(ctx context.Context, hash string, now time.Time, key core.APIKey) (core.APIKey, error)
	// AuditList pages audit entries newest first (by ID descending).
	AuditList(ctx context.Context, p AuditListParams) (Page[core.AuditEntry], error)

	// SubscriptionCreate inserts s. ErrConflict if the ID exists.
	SubscriptionCreate(ctx context.Context, s core.Subscription) error
	// SubscriptionCreateWithin is SubscriptionCreate within a limit: s is
	// inserted only if its tenant has fewer than max live subscriptions
	// (paused and disabled ones count, deleted ones not; max <= 0: no
	// limit), counted in the insert's transaction, which creates of one
	// tenant take in turn on every node sharing the store, so racing
	// creates never pass the limit together. ErrLimit, with nothing
	// written, if it has max already.
	SubscriptionCreateWithin(ctx context.Context, s core.Subscription, max int) error
	// SubscriptionGet returns a live (not deleted) subscription. ErrNotFound otherwise.
	SubscriptionGet(ctx context.Context, tenantID, id string) (core.Subscription, error)
	// SubscriptionList pages live subscriptions of one tenant (or, with
	// TenantID "", of all) by ID ascending.
	SubscriptionList(ctx context.Context, p SubscriptionListParams) (Page[core.Subscription], error)
	// SubscriptionListAll returns every live subscription of every tenant: the
	// matching index is built from it at start.
	SubscriptionListAll(ctx context.Context) ([]core.Subscription, error)
	// SubscriptionUpdate overwrites the mutable fields of a live subscription
	// (everything but ID, TenantID, CreatedAt), scoped to s.TenantID ("" any).
	// If s.State is disabled, its pending deliveries become skipped; if s.Host
	// changed, its pending deliveries move to the new host and shard
	// (admission must count them where they are sent). A backend may do
	// either in batches after the row's change commits (a backlog of millions
	// must not hold up ingest), but it returns only once they are done.
	// If s.State is active and the stored one is not (turned back on, from
	// disabled or paused), its failure clock and alert state restart in
	// the same write: failing_since cleared (its last failure kept), the
	// alert state ok. It is judged on its attempts from then on, so what
	// failed before neither disables it again (SubscriptionsFailing) nor
	// counts as a recovery (SubscriptionsRecovered).
	// ErrNotFound if absent or deleted.
	SubscriptionUpdate(ctx context.Context, s core.Subscription) error
	// SubscriptionDisable is SubscriptionUpdate of a subscription hookd
	// itself disabled (s.State disabled), recording in the same
	// transaction the hookd.subscription.disabled its owner is owed:
	// notice is that event's payload, listed by Notices until NoticeSent.
	// So the event is never lost between the decision and its write.
	// Errors as SubscriptionUpdate's; on error no notice is written.
	SubscriptionDisable(ctx context.Context, s core.Subscription, notice []byte) error
	// SubscriptionTested records that a test event was sent to s: it
	// writes the audit entry ctx carries under s's tenant, alone (no row
	// of s changes).
	SubscriptionTested(ctx context.Context, s core.Subscription) error
	// SubscriptionDelete marks a subscription deleted (its records stay for
	// the retention window) and skips its pending deliveries, as
	// SubscriptionUpdate does for a disabled one.
	// ErrNotFound if absent or already deleted.
	SubscriptionDelete(ctx context.Context, tenantID, id string, now time.Time) error
	// SubscriptionReseal looks, in ONE transaction, at up to p.Limit
	// subscriptions (deleted ones too) after p.After by ID whose stored
	// secrets or URL may need work, and rewrites those that do (Reseal):
	// plaintext from before sealing sealed, credentials in a URL moved to a
	// header, and with p.All every value under another key than the
	// keyring's first sealed under it (hookd rekey). updated_at stays. Safe
	// beside nodes writing: each row is read and written in one
	// transaction. A value whose key is not in the keyring is an error
	// (seal.ErrUnknownKey) and the batch writes nothing.
	SubscriptionReseal(ctx context.Context, p ResealParams) (ResealResult, error)
	// SubscriptionVacuum rewrites what holds subscriptions so that no old
	// copy of a value SubscriptionReseal replaced (plaintext from an older
	// release, a value under a retired key) stays in free space. SQLite:
	// VACUUM of the whole file, which needs it to itself (no hookd serve
	// running) and free disk about its size. PostgreSQL: VACUUM FULL of
	// the subscriptions table, which locks it while it runs.
	SubscriptionVacuum(ctx context.Context) error

	// EventInsertBatch writes many events, each with its deliveries, in ONE
	// transaction that is durable when it returns nil. An event whose
	// (tenant, idempotency key) already exists, in the store or earlier in the
	// batch, writes nothing and answers the first event's ID with Duplicate set.
	// For deliveries of ordered subscriptions whose event has an ordering key,
	// the store assigns Sequence (1, 2, ... per subscription and key).
	// The store decides at commit: a delivery given pending is written
	// skipped (LastError SkipDisabled or SkipDeleted; replayable) if its
	// subscription is disabled or deleted by then, since the caller matched
	// against a view of the subscriptions that may be behind, and the
	// change's own skip sees only what was pending when it ran. A paused
	// subscription's stay pending (held). The results say what was written.
	// On error nothing of the batch is written.
	EventInsertBatch(ctx context.Context, batch []EventInsert) ([]EventInsertResult, error)
	// EventGet returns an event and its deliveries (oldest first). ErrNotFound if absent.
	EventGet(ctx context.Context, tenantID, id string) (core.Event, []core.Delivery, error)
	// EventList pages one tenant's events newest first (by created_at,
	// then ID; cursors are TimeCursor with the ID), with their payloads
	// only if p.WithPayload, walking an index of the tenant's events by
	// time (of one type by time, with one of Types).
	EventList(ctx context.Context, p EventListParams) (Page[core.Event], error)
	// EventTypesSent returns the distinct types of one tenant's events
	// after after, ascending, at most limit: one index seek each, however
	// many events there are.
	EventTypesSent(ctx context.Context, tenantID, after string, limit int) ([]string, error)

	// DeliveryGet returns a delivery and its attempts (by N). ErrNotFound if absent.
	DeliveryGet(ctx context.Context, tenantID, id string) (core.Delivery, []core.Attempt, error)
	// DeliveryList pages one subscription's deliveries, newest (highest ID) first.
	DeliveryList(ctx context.Context, p DeliveryListParams) (Page[core.Delivery], error)
	// DeliveryListTenant pages the deliveries of tenant p.TenantID (which
	// must be set; p.SubscriptionID filters if set) newest first: by their
	// event's creation time and ID, then subscription ID (cursors are
	// TimeCursor with those two IDs). It walks the tenant's events by time
	// (EventList's index; with EventType, the type's) and each one's
	// deliveries, so deliveries need no index of their own, which every
	// result write would pay for: the time range bounds the walk, the
	// other filters are read along it. Since and Until are on the event's
	// creation time, which is its deliveries'.
	DeliveryListTenant(ctx context.Context, p DeliveryListParams) (Page[core.Delivery], error)
	// DeliveryCount counts a live subscription's deliveries matching p, up
	// to p.Max (more answers p.Max). ErrNotFound if the subscription is
	// absent, deleted or another tenant's.
	DeliveryCount(ctx context.Context, p DeliveryCountParams) (int, error)
	// DeliveryReplay puts a delivered, failed or skipped delivery back to
	// pending, due at now, starting a new round of retries
	// (RoundStart = AttemptCount). ErrNotFound if absent; ErrConflict if it is
	// already pending or its subscription is deleted.
	DeliveryReplay(ctx context.Context, tenantID, id string, now time.Time) (core.Delivery, error)
	// DeliveryDue returns up to p.Limit pending deliveries of subscription
	// p.SubscriptionID that are due at p.Now, if the subscription is active,
	// ordered by (next_attempt_at, id), with their events, skipping IDs in
	// p.Exclude. For an ordered subscription only the head of each ordering
	// key is returned: a delivery with a pending predecessor (same key, lower
	// sequence) waits. It also returns the earliest next_attempt_at after p.Now
	// among the subscription's pending deliveries (zero if none or not
	// active), so the caller knows when to ask again.
	DeliveryDue(ctx context.Context, p DeliveryDueParams) ([]core.Job, time.Time, error)
	// DeliveryPendingSubscriptions lists every active subscription with
	// pending deliveries on the given shards (nil: all), each with its host and
	// earliest next_attempt_at.
	DeliveryPendingSubscriptions(ctx context.Context, shards []int) ([]SubscriptionDue, error)
	// SubscriptionRampSet keeps when the subscription's endpoint circuit
	// last closed and the rate its recovery ramp is a share of (see
	// SubscriptionDue). It is admission's state, not the subscription's:
	// updated_at does not change.
	SubscriptionRampSet(ctx context.Context, id string, at time.Time, base float64) error
	// SubscriptionShedSet keeps when ingest began shedding the subscription
	// (since non-zero) unless a time is kept already, or clears it (since
	// zero). It returns what was kept before the call (zero: none): of
	// nodes deciding alike, the first to begin and the first to end each
	// know they were. An unknown ID keeps nothing and returns zero.
	SubscriptionShedSet(ctx context.Context, id string, since time.Time) (time.Time, error)
	// SubscriptionsShed lists the live subscriptions with a shedding kept,
	// and since when, by ID.
	SubscriptionsShed(ctx context.Context) (map[string]time.Time, error)
	// DeliveryRehost moves the subscription's pending deliveries that were
	// written under another host than its current one (by a node that had
	// not yet heard of the change) to the current host and its shard, and
	// returns how many. SubscriptionUpdate moves those already written; this
	// catches the ones written while the change travelled.
	DeliveryRehost(ctx context.Context, subscriptionID string) (int, error)
	// DeliveryExpire fails the subscription's pending deliveries whose
	// current round of retries (from creation or the last replay) began
	// before cutoff, with reason as last_error and no attempt: their retry
	// window is spent while the endpoint could not be tried. Returns how many.
	DeliveryExpire(ctx context.Context, subscriptionID string, cutoff, now time.Time, reason string) (int, error)
	// Purge looks at up to limit events created before cutoff, after the
	// cursor in (created_at, id) order, and removes those none of whose
	// deliveries is pending (pending work is never dropped, however old),
	// with their deliveries and attempts, first adding those deliveries to
	// the daily and hourly counts. Looking at limit events, rather than removing limit,
	// bounds each call's work however many old events are kept. Several
	// callers at once (nodes sharing a database) never count a row twice.
	Purge(ctx context.Context, cutoff time.Time, after PurgeCursor, limit int) (PurgeResult, error)
	// DailyCounts returns a subscription's daily counts, oldest day first.
	DailyCounts(ctx context.Context, subscriptionID string) ([]core.DailyCount, error)
	// DeliveryBuckets counts deliveries by the bucket of their creation:
	// every bucket of p, ascending, zeros where nothing happened. Each
	// count is what Purge kept for the bucket (hourly or daily counts, by
	// p.Width) plus the rows still there, read in one statement, so a
	// bucket's counts are the same before and after a purge. Pending is
	// live rows only; the latency is over the attempt rows still kept.
	// Purge keeps nothing by the minute: minute buckets count the rows
	// still there. An error if p is not a valid range (see
	// DeliveryBucketsParams).
	DeliveryBuckets(ctx context.Context, p DeliveryBucketsParams) ([]DeliveryBucket, error)
	// DeliveryBucketsEach is DeliveryBuckets' counts (latency aside) for
	// each of ids (distinct) apart, in their order, in one statement:
	// subscriptions of p.TenantID (which must be set), deleted ones
	// included; any other ID counts nothing.
	DeliveryBucketsEach(ctx context.Context, p DeliveryBucketsParams, ids []string) ([][]DeliveryBucket, error)
	// ReplayJobCreate inserts a job with its States and Rate (State
	// running, Replayed 0, Cursor ""), unless a job of its subscription is
	// running: then ErrConflict, with nothing written. The check is in the
	// insert's transaction, which creates of one subscription take in
	// turn on every node sharing the store, so one job runs per
	// subscription however the creates race.
	ReplayJobCreate(ctx context.Context, j core.ReplayJob) error
	// ReplayJobGet returns a job of a live subscription. ErrNotFound if
	// absent or another tenant's.
	ReplayJobGet(ctx context.Context, tenantID, id string) (core.ReplayJob, error)
	// ReplayJobsRunning lists the jobs neither done nor cancelled, oldest first.
	ReplayJobsRunning(ctx context.Context) ([]core.ReplayJob, error)
	// ReplayJobStep replays, in ONE transaction, up to limit of the job's
	// matching deliveries after its cursor (by ID): those in the job's
	// States become pending, due at now, in a new round; it advances the
	// cursor and the count, and marks the job done when none are left or
	// its subscription is gone. It reads the job's state in that
	// transaction: ErrConflict, with the job as it stands and nothing
	// written, if it is done or cancelled, so no step runs after a cancel
	// has committed.
	// A step that finishes the job of a live subscription records, in its
	// transaction, the hookd.replay.completed it owes (see Notices).
	// ErrNotFound if absent. Returns the job after the step and the IDs of
	// the deliveries it put back.
	ReplayJobStep(ctx context.Context, id string, limit int, now time.Time) (core.ReplayJob, []string, error)
	// ReplayJobCancel marks a running job cancelled at now and returns it
	// as written; its count stays, and deliveries already put back stay
	// pending. ErrNotFound if absent, of a deleted subscription or another
	// tenant's (tenantID "" any); ErrConflict, with the job as it stands,
	// if it is done or cancelled already.
	ReplayJobCancel(ctx context.Context, tenantID, id string, now time.Time) (core.ReplayJob, error)
	// ReplayJobList pages one subscription's jobs newest first (by ID
	// descending), scoped to p.TenantID ("" any).
	ReplayJobList(ctx context.Context, p ReplayJobListParams) (Page[core.ReplayJob], error)
	// DeliveryUntried returns those of ids whose deliveries are pending and
	// not yet tried in their current round (attempt_count = round_start):
	// put back in line and not yet sent, or sent with the result not yet
	// written. Unknown IDs are left out.
	DeliveryUntried(ctx context.Context, ids []string) ([]string, error)
	// DeliveryPendingCounts counts the pending deliveries of every
	// subscription with at least min of them: the shedder's one read.
	DeliveryPendingCounts(ctx context.Context, min int) (map[string]int, error)
	// DeliveryStats counts a live subscription's pending and failed
	// deliveries (within retention) with the oldest of each. ErrNotFound if
	// absent, deleted or another tenant's.
	DeliveryStats(ctx context.Context, tenantID, subscriptionID string) (DeliveryStats, error)
	// DeliveryStatsList is DeliveryStats for many subscriptions in one
	// query (a page of a list); those absent, deleted or another tenant's
	// are left out of the answer.
	DeliveryStatsList(ctx context.Context, tenantID string, subscriptionIDs []string) (map[string]DeliveryStats, error)
	// HealthPing checks the database answers a read: cheap, for a periodic
	// check while all is well. ErrUnavailable if it does not.
	HealthPing(ctx context.Context) error
	// HealthWrite commits one small write that needs free space, as an
	// event's does: run only while writes fail, to tell when they commit
	// again. ErrUnavailable or ErrFull while they cannot.
	HealthWrite(ctx context.Context) error
	// HealthOutage returns err as a store outage (wrapping ErrUnavailable
	// or ErrFull) when the driver's error in it says the database is
	// unreachable or full, whichever method returned it: not every method
	// maps its driver's errors, and a background task that cannot tell an
	// outage from a fault of its own logs each one. Any other error, or
	// one already mapped, is returned as it is.
	HealthOutage(err error) error
	// DeliveryRecordResults writes attempt outcomes in ONE transaction. A
	// result moves its delivery on (state, next try, last status and error,
	// attempt_count = N) only if the delivery is still pending and its
	// attempt_count is below N (a delivery skipped meanwhile stays skipped;
	// a stale result never winds a delivery back), and its attempt is
	// inserted as number N. A result that cannot move its delivery on (e.g.
	// from a node whose lease lapsed while its attempt ran, after the new
	// owner recorded the delivery) was still a send: its attempt is inserted
	// under the delivery's next free number and attempt_count raised to it,
	// the rest of the delivery left alone, so attempt_count counts every
	// send. An attempt already recorded (same delivery, start and duration:
	// a retried call whose commit did land) is not written again. A result
	// whose delivery no longer exists (Purge removed it while its attempt
	// ran) is dropped: failing the batch would fail every other result in it.
	// In the same transaction each result's subscription learns whether it
	// is failing (see Outcomes): a success clears its failing_since; a
	// failure sets it unless set, or resets it when the last failure was
	// over a day before (failing means failing every day).
	DeliveryRecordResults(ctx context.Context, rs []AttemptResult) error

	// SubscriptionsFailing lists the live, active subscriptions every
	// attempt of which has failed since before or earlier, the last of them
	// at lastAfter or later.
	SubscriptionsFailing(ctx context.Context, before, lastAfter time.Time) ([]FailingSubscription, error)
	// SubscriptionsRecovered lists the subscriptions alerted failing
	// (SubscriptionAlert) whose attempts succeed again, each with the
	// FailingSince its failing alert saw (the success cleared the
	// subscription's own) and its last failure.
	SubscriptionsRecovered(ctx context.Context) ([]FailingSubscription, error)
	// SubscriptionAlert moves a subscription's alert state, once: with
	// failing, to failing unless it is failing already or was alerted failing
	// less than every before now (keeping what failing_since is then, or
	// now if the result writes have not set it yet, for
	// SubscriptionsRecovered); else from failing back to ok. It reports
	// whether it moved: the caller sends the alert only then, so nodes
	// racing send it once.
	SubscriptionAlert(ctx context.Context, id string, failing bool, now time.Time, every time.Duration) (bool, error)
	// Notices lists the operational events owed to live subscriptions'
	// tenants (SubscriptionDisable, ReplayJobStep) and not yet marked
	// sent, disables first, each kind by ID. One of a deleted
	// subscription is not listed.
	Notices(ctx context.Context) ([]Notice, error)
	// NoticeSent marks n's event written: it is listed no more. A
	// disable's notice stays if another disable has replaced it since
	// (its payload differs). Unknown notices are ignored.
	NoticeSent(ctx context.Context, n Notice) error

	// What the Svix-compatible API needs beyond the above.
	//
	// TenantCreate with a zero key (ID "") inserts the tenant alone, and an
	// ID whose tenant was deleted (TenantDelete) is taken again by the new
	// one. TenantGet and TenantList see live tenants only.
	//
	// TenantByUID returns the live tenant whose UID is uid. ErrNotFound if none.
	TenantByUID(ctx context.Context, uid string) (core.Tenant, error)
	// TenantList pages live tenants by ID ascending.
	TenantList(ctx context.Context, p TenantListParams) (Page[core.Tenant], error)
	// TenantUpdate overwrites a live tenant's Name, UID, Metadata,
	// RateLimit and UpdatedAt. ErrNotFound if absent; ErrConflict if
	// another live tenant has the UID.
	TenantUpdate(ctx context.Context, t core.Tenant) error
	// TenantDelete marks a live tenant deleted. Its subscriptions and keys
	// are the caller's to delete and revoke first. ErrNotFound if absent.
	TenantDelete(ctx context.Context, id string, now time.Time) error
	// SubscriptionByUID returns the tenant's live subscription whose UID is
	// uid. ErrNotFound if none.
	SubscriptionByUID(ctx context.Context, tenantID, uid string) (core.Subscription, error)
	// AttemptList pages the attempts of one subscription's or one event's
	// deliveries (either or both given), newest first, each with its
	// delivery.
	AttemptList(ctx context.Context, p AttemptListParams) (Page[AttemptRow], error)
	// EventTypeCreate inserts an event type. ErrConflict if the name exists
	// (archived or not).
	EventTypeCreate(ctx context.Context, et core.EventType) error
	// EventTypeGet: ErrNotFound if absent (archived ones are found).
	EventTypeGet(ctx context.Context, name string) (core.EventType, error)
	// EventTypeList pages event types by name ascending.
	EventTypeList(ctx context.Context, p EventTypeListParams) (Page[core.EventType], error)
	// EventTypeUpdate overwrites everything but Name and CreatedAt.
	// ErrNotFound if absent.
	EventTypeUpdate(ctx context.Context, et core.EventType) error
	// EventTypeDelete removes an event type. ErrNotFound if absent.
	EventTypeDelete(ctx context.Context, name string) error
}

type TenantListParams struct {
	Cursor string
	Limit  int
}

type AttemptListParams struct {
	TenantID       string    // "" for any
	SubscriptionID string    // "" for any (then EventID is given)
	EventID        string    // "" for any (then SubscriptionID is given)
	Since, Until   time.Time // on started_at: Since <= t < Until; zero: unbounded
	Cursor         string    // from a previous page (AttemptRow.Cursor)
	Limit          int
}

// AttemptRow is one attempt with its delivery.
type AttemptRow struct {
	Attempt  core.Attempt
	Delivery core.Delivery
}

// Cursor orders attempts newest first: by delivery ID, then number.
func (a AttemptRow) Cursor() string {
	return fmt.Sprintf("%s.%010d", a.Attempt.DeliveryID, a.Attempt.N)
}

type EventTypeListParams struct {
	IncludeArchived bool
	Cursor          string
	Limit           int
}

type EventInsert struct {
	Event      core.Event
	Deliveries []core.Delivery // fully formed by the caller, Sequence aside
}

type EventInsertResult struct {
	EventID   string
	Duplicate bool
	// Deliveries as written, in the order given (with Sequence, and the
	// state the store decided); nil for a duplicate.
	Deliveries []core.Delivery
}

// Why EventInsertBatch wrote skipped a delivery it was given pending.
const (
	SkipDisabled = "subscription disabled"
	SkipDeleted  = "subscription deleted"
)

// SkipReason is the LastError a pending delivery is written with for a
// subscription in state (deleted or not); "" if it stays pending.
func SkipReason(state core.SubscriptionState, deleted bool) string {
	switch {
	case deleted:
		return SkipDeleted
	case state == core.SubDisabled:
		return SkipDisabled
	}
	return ""
}

type Page[T any] struct {
	Data       []T
	NextCursor string // "" on the last page
}

type SubscriptionListParams struct {
	TenantID string // "" for any
	Cursor   string // from a previous page's NextCursor
	Limit    int
	// Failing keeps only those failing now (failing_since set), read from
	// an index of them alone.
	Failing bool
}

type APIKeyListParams struct {
	TenantID string
	Cursor   string
	Limit    int
}

type AuditListParams struct {
	TenantID     string    // "" for any
	Action       string    // "" for any
	Since, Until time.Time // on At: Since <= t < Until; zero: unbounded
	Cursor       string
	Limit        int
}

type DeliveryListParams struct {
	TenantID       string // "" for any
	SubscriptionID string
	State          core.DeliveryState // "" for any
	EventType      string             // exact; "" for any
	Status         int                // last_status; 0 for any (DeliveryListTenant only)
	Since, Until   time.Time          // on created_at: Since <= t < Until; zero: unbounded
	Cursor         string
	Limit          int
}

type ReplayJobListParams struct {
	TenantID       string // "" for any
	SubscriptionID string
	Cursor         string
	Limit          int
}

type EventListParams struct {
	TenantID       string
	Types          []string  // exact; empty for any
	IdempotencyKey string    // "" for any
	Since, Until   time.Time // on created_at: Since <= t < Until; zero: unbounded
	Cursor         string    // a TimeCursor
	Limit          int
	WithPayload    bool
}

type DeliveryCountParams struct {
	TenantID       string // "" for any
	SubscriptionID string
	States         []core.DeliveryState // at least one
	EventTypes     []string             // exact; empty for any
	Since, Until   time.Time            // on created_at: Since <= t < Until; zero: unbounded
	Max            int                  // counting stops there
}

// TimeCursor is the cursor of a list newest first: the last row's
// creation time and the keys that order the rows of one time.
func TimeCursor(t time.Time, keys ...string) string {
	return t.UTC().Format(time.RFC3339Nano) + "," + strings.Join(keys, ",")
}

// ParseTimeCursor reads a TimeCursor of n keys.
func ParseTimeCursor(c string, n int) (time.Time, []string, error) {
	parts := strings.Split(c, ",")
	t, err := time.Parse(time.RFC3339Nano, parts[0])
	if err != nil || len(parts) != n+1 || slices.Contains(parts[1:], "") {
		return time.Time{}, nil, errors.New("not a cursor this list gave")
	}
	return t, parts[1:], nil
}

type DeliveryDueParams struct {
	SubscriptionID string
	Now            time.Time
	Limit          int
	Exclude        []string
}

type SubscriptionDue struct {
	SubscriptionID string
	Host           string
	NextAttemptAt  time.Time
	// RampAt and RampBase are the subscription's last recovery ramp: when
	// its circuit closed (zero: none) and the rate the ramp is a share of
	// (SubscriptionRampSet), so a node taking its shard over goes on with it.
	RampAt   time.Time
	RampBase float64
	// GoneAt is when its endpoint last answered 410 Gone, if nothing it
	// was sent succeeded since (zero: not so): the failure is written with
	// the result, the disable after it, and a node that died between the
	// two left the subscription active.
	GoneAt time.Time
}

type DeliveryStats struct {
	Pending         int
	OldestPendingAt time.Time // created_at of the oldest pending delivery; zero if none
	Failed          int
	OldestFailedAt  time.Time // created_at of the oldest failed delivery; zero if none
	FailingSince    time.Time // every attempt since has failed; zero if the last succeeded
	// NextAttemptAt is the earliest next_attempt_at of its pending
	// deliveries (zero if none): when the schedule next tries it.
	NextAttemptAt time.Time
	// LastFailure is its last failed attempt (zero At: none yet), kept by
	// the result writes with FailingSince; it stays after a success.
	LastFailure Failure
}

// Failure is what a subscription's last failed attempt showed.
type Failure struct {
	At       time.Time
	Status   int    // 0: no HTTP answer
	Error    string // why there was no answer
	Response string // the first MaxFailureHead bytes of the answer body
}

// MaxFailureHead bounds the answer kept with a subscription's last
// failure: enough to recognise it ("<html>… 502 Bad Gateway"), small
// enough for a row written on every failing batch.
const MaxFailureHead = 256

// FailingSubscription is a subscription whose attempts fail, and since when.
type FailingSubscription struct {
	ID, TenantID, URL, Host     string
	FailingSince, LastFailureAt time.Time // zero once it recovered
}

// Notice is an operational event a decision owes its tenant, recorded in
// the decision's own transaction so that neither a failed write nor a
// crash between the two loses it. The sender writes the event under an
// idempotency key taken from the decision, then NoticeSent: sent again
// after a failure, it is still written once.
type Notice struct {
	SubscriptionID, TenantID string
	Host, URL                string // the subscription's, as it is now
	// Disabled is a disable's event payload, as SubscriptionDisable got it;
	// nil for a job.
	Disabled []byte
	// Job is the replay job a step finished (ID "" for a disable).
	Job core.ReplayJob
}

// AttemptResult is one finished attempt and the delivery's state after it.
type AttemptResult struct {
	SubscriptionID string
	Attempt        core.Attempt
	State          core.DeliveryState // pending (to retry), delivered or failed
	NextAttemptAt  time.Time          // when State is pending
	Now            time.Time          // updated_at
}

// Leaser is implemented by a backend several hookd nodes share (PostgreSQL).
// Each destination host lives on one of core.NumShards shards, and a node
// dispatches only the shards it holds a lease on, so circuit state,
// concurrency caps and rate budgets stay exact and local to one node.
type Leaser interface {
	// ShardLeases is called by every node every few seconds (well inside
	// ttl). In one transaction it records that node is alive until now+ttl,
	// renews the node's leases to now+ttl, gives back any shards above its
	// fair share (NumShards over the live nodes, rounded up) so that a node
	// that joins gets work, and takes free or lapsed shards up to that share.
	// A shard given back is left, not freed: it drops out of the answer at
	// once but stays the node's (renewed) until ShardHandOver, so nothing
	// the node still has in flight on it is sent again by the taker. Below
	// its share, a node takes back shards it is leaving first.
	// It returns the shards node holds afterwards, ascending, all of which
	// are held until now+ttl, and those it is leaving (ascending too): the
	// caller hands those over once it has nothing in flight on them, even
	// ones it did not know it was leaving (a restart, a lost reply). A backend may time leases by its own clock
	// rather than now (PostgreSQL does, so nodes whose clocks disagree still
	// agree on which leases are live); callers guard their sends with
	// durations measured from before the call, which hold either way.
	ShardLeases(ctx context.Context, node string, ttl time.Duration, now time.Time) (held, leaving []int, err error)
	// ShardHandOver frees the given shards node is leaving (others are left
	// alone), so the other nodes can take them at once.
	ShardHandOver(ctx context.Context, node string, shards []int) error
	// ShardRelease gives back every lease node holds and forgets the node, so
	// the others can take its shards at once (graceful shutdown).
	ShardRelease(ctx context.Context, node string) error
}

// CircuitBoard is implemented by a backend several nodes share: the node
// that dispatches a host publishes its circuits, the host's and those of
// its endpoints, so any node can report them.
type CircuitBoard interface {
	// CircuitsPublish records each circuit as given.
	CircuitsPublish(ctx context.Context, cs []Circuit) error
	// CircuitsGet returns the last published circuit of each of keys that
	// has one, in no particular order.
	CircuitsGet(ctx context.Context, keys []string) ([]Circuit, error)
}

// Circuit is one key's breaker: a host's ("host:port") or an endpoint's
// (its subscription ID). Closed, or open for RetryIn more (then it lets a
// probe through: half-open, RetryIn <= 0); PausedFor > 0 while a
// Retry-After pause holds it that much longer. CircuitsGet also says how
// long ago it was published (Age): owners publish open or paused ones again
// now and then, so an old row means the host moved to a node with it
// closed. Durations, not times: the store's clock measures them all, so
// nodes whose clocks disagree still read the same.
type Circuit struct {
	Key       string
	Open      bool
	RetryIn   time.Duration
	PausedFor time.Duration
	// CutRate > 0: an endpoint's 429 back-off is in force, at CutRate
	// deliveries a second, recovering up to CutCeiling (when published).
	CutRate, CutCeiling float64
	Age                 time.Duration
}

// Notifier is implemented by a backend several nodes share: it tells the
// other nodes what changed, so they act without waiting for a poll. All of
// it is sent at commit:
//   - deliveries made due (EventInsertBatch, DeliveryReplay, ReplayJobStep,
//     SubscriptionUpdate back to active or to a new host): DueDeliveries,
//     for the owner of their shard;
//   - a subscription created, updated or deleted: DueSubscription, for
//     every node's in-memory registry;
//   - a node joining, giving shards back or leaving (ShardLeases,
//     ShardRelease): DueLeases, so the others rebalance at once;
//   - an API key revoked (APIKeyRevoke): DueKeyRevoked, so every node
//     stops accepting it.
type Notifier interface {
	// Listen calls fn for each notification from another Store instance
	// (not this one: its own writes are handed off in-process) until ctx
	// ends, reconnecting as needed; fn runs on Listen's goroutine and must
	// not block. It returns ctx's error. Notifications sent while it is not
	// listening are lost, so each time it starts listening (the first time
	// and after every reconnect) it calls fn with DueResumed: the caller
	// then catches up by reading the store.
	Listen(ctx context.Context, fn func(Due)) error
}

// PurgeCursor is where a Purge stopped: the last event it looked at. The
// zero value starts at the oldest.
type PurgeCursor struct {
	CreatedAt time.Time
	EventID   string
}

// PurgeResult is what one Purge did.
type PurgeResult struct {
	Removed int         // events removed
	Looked  int         // events looked at: fewer than the limit means none is left
	Next    PurgeCursor // where the next call goes on
}

// Bucket widths DeliveryBuckets takes: a minute, an hour, or a UTC day
// (Unix time has no leap seconds, so days are 24 h).
const (
	BucketMinute = time.Minute
	BucketHour   = time.Hour
	BucketDay    = 24 * time.Hour
)

// DeliveryBucketsParams says whose deliveries to count, and over which
// buckets: [Since, Until) in steps of Width (BucketMinute, BucketHour or BucketDay),
// both multiples of Width since the Unix epoch, Since before Until.
type DeliveryBucketsParams struct {
	// SubscriptionID counts that subscription alone (the caller has
	// checked whose it is); "" counts every subscription of TenantID,
	// deleted ones included.
	SubscriptionID string
	TenantID       string
	Since, Until   time.Time
	Width          time.Duration
	// ExactUpTo is how many attempts a bucket may hold for its latency to
	// be read from all of them (0: DefaultExactUpTo); see Sample.
	ExactUpTo int64
}

// DefaultExactUpTo bounds the attempts a bucket's latency sorts.
const DefaultExactUpTo = 1 << 16

// Sample says how much of a bucket of n attempts its latency reads: the
// attempts of 1 in 32^k of its deliveries (chosen by a hash of their IDs),
// k the least (at most 4) that brings n/32^k to ExactUpTo or under. So a
// bucket of millions of attempts sorts tens of thousands, at least
// ExactUpTo/32 of them when it samples.
func (p DeliveryBucketsParams) Sample(n int64) int {
	most := p.ExactUpTo
	if most <= 0 {
		most = DefaultExactUpTo
	}
	k := 0
	for n > most && k < 4 {
		n /= 32
		k++
	}
	return k
}

// Buckets returns p's buckets, every count zero: what a backend fills.
func (p DeliveryBucketsParams) Buckets() ([]DeliveryBucket, error) {
	w := int64(p.Width / time.Second)
	aligned := func(t time.Time) bool { return w > 0 && t.Unix() >= 0 && t.Unix()%w == 0 && t.Nanosecond() == 0 }
	switch {
	case p.Width != BucketMinute && p.Width != BucketHour && p.Width != BucketDay:
		return nil, fmt.Errorf("delivery buckets: width %s is not a minute, an hour or a day", p.Width)
	case !aligned(p.Since) || !aligned(p.Until) || !p.Since.Before(p.Until):
		return nil, fmt.Errorf("delivery buckets: [%s, %s) is not a range of whole %s buckets", p.Since, p.Until, p.Width)
	}
	out := make([]DeliveryBucket, (p.Until.Unix()-p.Since.Unix())/w)
	for i := range out {
		out[i].Start = p.Since.Add(time.Duration(i) * p.Width).UTC()
	}
	return out, nil
}

// DeliveryBucket is what the deliveries created in one bucket came to.
type DeliveryBucket struct {
	Start                      time.Time
	Delivered, Failed, Skipped int64
	Pending                    int64 // live rows only: retention never removes pending work
	Attempts                   int64 // the attempts of the bucket's deliveries (their attempt_count)
	Timed                      int64 // attempt rows the latency is over: those kept, or a sample of them
	LatencyP50, LatencyP99     time.Duration
}

// Due is one notification: by default, that a subscription has deliveries
// that became due, and their shard.
type Due struct {
	Kind           DueKind
	SubscriptionID string // DueDeliveries, DueSubscription
	Shard          int    // DueDeliveries
	KeyID          string // DueKeyRevoked
}

type DueKind uint8

const (
	DueDeliveries   DueKind = iota // SubscriptionID has due work on Shard
	DueSubscription                // SubscriptionID was created, changed or deleted
	DueLeases                      // shard shares changed: lease again now
	DueResumed                     // Listen (re)started: earlier notifications may be lost
	DueKeyRevoked                  // API key KeyID was revoked
)

// PageLimit applies the page size rules: 50 by default, at most 100.
func PageLimit(n int) int {
	switch {
	case n <= 0:
		return 50
	case n > 100:
		return 100
	}
	return n
}

// PageOf makes a page of rows fetched with one row more than limit (that
// row only says another page exists); the cursor is the last row's ID.
func PageOf[T any](rows []T, limit int, id func(T) string) Page[T] {
	var page Page[T]
	if len(rows) > limit {
		rows = rows[:limit]
		page.NextCursor = id(rows[limit-1])
	}
	page.Data = rows
	return page
}

// Outcome is what one batch of results says of one subscription: its last
// successful attempt, and the failed ones after it (all of them with none).
type Outcome struct {
	SubscriptionID            string
	LastSuccess               time.Time // zero: none in the batch
	FirstFailure, LastFailure time.Time // the failures after LastSuccess; zero: none
	// Last is the attempt at LastFailure (its Response cut to MaxFailureHead).
	Last Failure
}

// Outcomes sums a batch of results by subscription, for failing_since.
func Outcomes(rs []AttemptResult) []Outcome {
	by := map[string]*Outcome{}
	for _, r := range rs {
		o := by[r.SubscriptionID]
		if o == nil {
			o = &Outcome{SubscriptionID: r.SubscriptionID}
			by[r.SubscriptionID] = o
		}
		if at := r.Attempt.StartedAt; r.State == core.DeliveryDelivered && at.After(o.LastSuccess) {
			o.LastSuccess = at
		}
	}
	for _, r := range rs {
		o, at := by[r.SubscriptionID], r.Attempt.StartedAt
		if r.State == core.DeliveryDelivered || !at.After(o.LastSuccess) {
			continue // failures before the last success do not count
		}
		if o.FirstFailure.IsZero() || at.Before(o.FirstFailure) {
			o.FirstFailure = at
		}
		if at.After(o.LastFailure) {
			o.LastFailure = at
			a := r.Attempt
			o.Last = Failure{At: at, Status: a.StatusCode, Error: a.Error, Response: head(a.Response, MaxFailureHead)}
		}
	}
	out := make([]Outcome, 0, len(by))
	for _, o := range by {
		out = append(out, *o)
	}
	slices.SortFunc(out, func(a, b Outcome) int { return strings.Compare(a.SubscriptionID, b.SubscriptionID) })
	return out
}

// head cuts s to at most n bytes on a rune boundary.
func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
