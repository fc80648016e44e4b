package core

import (
	"strings"
	"time"
)

// DeliveryState is where a delivery stands; see docs/architecture.md.
type DeliveryState string

const (
	// Pending: waiting for its next attempt (or in flight: in-flight work stays
	// pending in the store so a crash means a resend, never a loss).
	DeliveryPending DeliveryState = "pending"
	// Delivered: an attempt got a 2xx.
	DeliveryDelivered DeliveryState = "delivered"
	// Failed: retries exhausted or a non-retryable answer. Replayable.
	DeliveryFailed DeliveryState = "failed"
	// Skipped: not attempted because the subscription was disabled or deleted. Replayable.
	DeliverySkipped DeliveryState = "skipped"
)

// SubscriptionState says whether a subscription's deliveries are sent.
type SubscriptionState string

const (
	SubActive   SubscriptionState = "active"   // deliveries are sent
	SubPaused   SubscriptionState = "paused"   // deliveries are kept pending, not sent
	SubDisabled SubscriptionState = "disabled" // new and pending deliveries are skipped
)

// DefaultTenant is the tenant the admin token acts on when none is named.
const DefaultTenant = "default"

type Tenant struct {
	ID        string
	Name      string
	CreatedAt time.Time

	// Set through the Svix-compatible API, where a tenant is an
	// application. UID is the application's uid when it is not itself a
	// tenant ID (see docs/svix.md); "" none. RateLimit (per second, 0
	// none) is the rate_limit endpoints created there start with.
	UID       string
	Metadata  map[string]string
	RateLimit int
	UpdatedAt time.Time // zero: never updated since created
}

// APIKey is a tenant's credential. Only the SHA-256 of the key is stored.
type APIKey struct {
	ID       string
	TenantID string
	Hash     string // hex SHA-256 of the plaintext key
	Name     string // the owner's label; may be empty
	// Prefix is the key's first characters ("hk_AbCd"), enough to tell keys
	// apart in a list; empty for keys made before prefixes were kept.
	Prefix     string
	CreatedAt  time.Time
	ExpiresAt  time.Time // zero: never
	RevokedAt  time.Time // zero: not revoked
	LastUsedAt time.Time // zero: never used (written at most once a minute)
	// Scope is "" for a tenant's own key, ScopePortal for a portal
	// session's: that key cannot post events or manage keys and links.
	Scope string
}

// ScopePortal marks the key a portal link is exchanged for.
const ScopePortal = "portal"

// PortalLink is a one-time sign-in to one tenant's dashboard: its token
// (stored only as SHA-256) is exchanged once, before ExpiresAt, for a
// portal-scoped key expiring with the link.
type PortalLink struct {
	ID        string
	TenantID  string
	Hash      string // hex SHA-256 of the token
	CreatedAt time.Time
	ExpiresAt time.Time
	UsedAt    time.Time // zero: not exchanged yet
	KeyID     string    // the key it was exchanged for
}

// Live reports whether the key may be used at now: not revoked, not expired.
func (k APIKey) Live(now time.Time) bool {
	return k.RevokedAt.IsZero() && (k.ExpiresAt.IsZero() || now.Before(k.ExpiresAt))
}

// AuditEntry is one change recorded in the audit log: who made it, from
// where, what it was and what it touched. Detail names what changed (field
// names, states), never a secret, a header value or a key.
type AuditEntry struct {
	ID       string
	At       time.Time
	TenantID string // the tenant whose object changed
	// Actor is "admin" (the admin token), the ID of the tenant key that
	// acted, or "hookd" (a change hookd made on its own, e.g. a disable
	// after a 410).
	Actor      string
	Action     string // e.g. subscription.update; see package audit
	TargetID   string // the object changed: sub_…, key_…, dlv_…, a tenant ID
	RemoteAddr string // the request's peer address; "" for hookd's own changes
	Detail     []byte // a JSON object
}

type Subscription struct {
	ID         string
	TenantID   string
	URL        string
	Host       string // destination host:port, lowercased: the admission and shard key
	EventTypes []string
	// Secret signs every delivery; PrevSecret also signs until PrevSecretExpiresAt.
	Secret              string
	PrevSecret          string
	PrevSecretExpiresAt time.Time
	Ordered             bool
	RetrySchedule       []time.Duration // nil: DefaultRetrySchedule
	Timeout             time.Duration   // 0: DefaultTimeout
	MaxConcurrency      int             // 0: the host default
	RateLimit           float64         // deliveries per second; 0: unlimited
	RetryStatusCodes    []int           // extra 3xx/4xx codes to retry instead of failing
	State               SubscriptionState
	DisabledReason      string
	CreatedAt           time.Time
	UpdatedAt           time.Time

	// Headers are sent with every attempt (an endpoint's credentials),
	// names canonical (see ValidateHeaders); sealed at rest like the
	// secrets. Never changed in place: a change sets a new map.
	Headers map[string]string

	// SvixHeaders: Svix's wire format. Each attempt also carries svix-id,
	// svix-timestamp and svix-signature (the webhook-* values), for
	// receivers verifying with Svix's libraries, and its body is the
	// payload itself, not hookd's envelope; and, as Svix does, every
	// answer but a 2xx or 410 is retried. Set on subscriptions created
	// through /api/v1.
	SvixHeaders bool
	// An endpoint's fields in the Svix-compatible API: its uid (unique
	// among the tenant's live subscriptions; "" none), description and
	// metadata. hookd itself reads none of them.
	UID         string
	Description string
	Metadata    map[string]string
}

// Secrets returns the secrets that sign a delivery at now: the current one and,
// during the rotation grace period, the previous one.
func (s *Subscription) Secrets(now time.Time) []string {
	if s.PrevSecret != "" && now.Before(s.PrevSecretExpiresAt) {
		return []string{s.Secret, s.PrevSecret}
	}
	return []string{s.Secret}
}

// Schedule returns the subscription's retry delays after the first try.
func (s *Subscription) Schedule() []time.Duration {
	if s.RetrySchedule != nil {
		return s.RetrySchedule
	}
	return DefaultRetrySchedule
}

// SendTimeout returns how long one attempt may take.
func (s *Subscription) SendTimeout() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return DefaultTimeout
}

type Event struct {
	ID             string
	TenantID       string
	Type           string
	Payload        []byte // raw JSON
	IdempotencyKey string
	OrderingKey    string
	CreatedAt      time.Time
	// About and Only steer an event hookd emits itself, at ingest (they are
	// not stored: its deliveries are). About is the subscription the event
	// is about, which never receives it, so a broken endpoint cannot feed a
	// loop; Only, when set, is the one subscription it goes to (a test event).
	About, Only string
}

// ReservedPrefix starts the types of the events hookd emits itself
// (operational webhooks, test events): tenants cannot post them, and only
// a pattern naming them (hookd.* or an exact type) receives them, never *.
const ReservedPrefix = "hookd."

// Reserved reports whether an event type is hookd's own.
func Reserved(eventType string) bool { return strings.HasPrefix(eventType, ReservedPrefix) }

type Delivery struct {
	ID             string
	EventID        string
	SubscriptionID string
	TenantID       string
	EventType      string // denormalised from the event for filtering
	Host           string
	Shard          int
	State          DeliveryState
	AttemptCount   int // attempts ever made
	// RoundStart is AttemptCount when the current round of retries began
	// (0, or the count at the last replay); AttemptCount-RoundStart indexes the schedule.
	RoundStart int
	// RoundStartedAt is when the current round began: CreatedAt, or the
	// last replay. Read by DeliveryGet only (a list does not need it).
	RoundStartedAt time.Time
	NextAttemptAt  time.Time
	LastStatus     int
	LastError      string
	OrderingKey    string // the event's, denormalised: ordered lines are per key
	Sequence       int64  // per (subscription, ordering key); 0 when not ordered
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

type Attempt struct {
	DeliveryID string
	N          int // 1-based, over the delivery's whole life
	StartedAt  time.Time
	Duration   time.Duration
	StatusCode int    // 0 when no HTTP answer
	Error      string // empty on an HTTP answer
	Response   string // first MaxResponseHead bytes of the answer body
	// ResponseHeaders are the answer's headers, one "Name: value" a line,
	// by name, whole lines up to MaxResponseHead bytes.
	ResponseHeaders string
}

// Job is what the dispatcher needs to send one delivery.
type Job struct {
	Delivery Delivery
	Event    Event
}

// ReplayState is where a bulk replay job stands.
type ReplayState string

const (
	ReplayRunning   ReplayState = "running"   // putting deliveries back in line
	ReplayDone      ReplayState = "done"      // every matching delivery was put back
	ReplayCancelled ReplayState = "cancelled" // stopped by a client; what it put back stays
)

// ReplayStatesDefault are the delivery states a bulk replay puts back
// unless asked otherwise: what the endpoint missed.
var ReplayStatesDefault = []DeliveryState{DeliveryFailed, DeliverySkipped}

// ReplayRateMax bounds a replay job's pace (deliveries put back per second).
const ReplayRateMax = 500

// RateMin is the slowest pace a rate_limit or a replay's rate may ask,
// deliveries per second (one in about 17 minutes): below it a delivery
// waits for hours or, at 1e-300, for ever, and nothing says why.
const RateMin = 0.001

// ReplayJob puts a subscription's deliveries in States created in
// [Since, Until) back in line, paced at Rate, so a recovered endpoint gets
// what it missed without a flood.
type ReplayJob struct {
	ID             string
	TenantID       string
	SubscriptionID string
	Since, Until   time.Time       // Until zero: no upper bound
	EventTypes     []string        // exact types; empty: all
	States         []DeliveryState // delivered, failed, skipped; never pending
	Rate           float64         // deliveries put back per second, at most
	State          ReplayState
	Replayed       int    // deliveries put back in line so far
	Cursor         string // the last delivery ID considered
	CreatedAt      time.Time
	UpdatedAt      time.Time
	CancelledAt    time.Time // zero unless cancelled
}

// DailyCount is what one subscription's deliveries created on one UTC day
// came to, kept after retention removed them.
type DailyCount struct {
	SubscriptionID string
	Day            time.Time // 00:00 UTC
	Delivered      int64
	Failed         int64
	Skipped        int64
	Attempts       int64
}

// EventType documents an event type endpoints may filter on (the Svix
// API's event types: hookd matches without them).
type EventType struct {
	Name         string
	Description  string
	Archived     bool
	Deprecated   bool
	GroupName    string
	FeatureFlags []string
	Schemas      []byte // a JSON object; nil: none
	CreatedAt    time.Time
	UpdatedAt    time.Time
}
