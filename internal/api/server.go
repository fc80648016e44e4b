// Package api serves hookd's REST API (/v1), health checks and the OpenAPI
// document. Handlers validate everything before writing anything.
package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"hookd/internal/audit"
	"hookd/internal/core"
	"hookd/internal/dispatch"
	"hookd/internal/ingest"
	"hookd/internal/metrics"
	"hookd/internal/outage"
	"hookd/internal/store"
	"hookd/internal/subs"
)

// Guard checks a subscription URL's host at registration (the dialer checks
// the address actually dialled at send time).
type Guard interface {
	CheckHost(hostname string) error
}

// Dispatcher is what the API asks of the dispatcher: to look at work that
// appeared in the store without a hand-off (a replay), and what it knows
// of a subscription's health.
type Dispatcher interface {
	Wake(host, subscriptionID string)
	Health(host, subscriptionID string) dispatch.Health
}

type Config struct {
	Store store.Store
	// Subs makes every subscription change (store, then registry, then
	// the dispatcher's wake-up).
	Subs     *subs.Service
	Ingest   *ingest.Ingester
	Dispatch Dispatcher
	// Replays is told when a bulk replay job is created (nil: it finds it
	// at its next tick).
	Replays    interface{ Kick() }
	Guard      Guard
	AdminToken string
	Version    string
	// Ready reports whether the node should take traffic (nil: always).
	Ready func() error
	// Metrics is served on GET /metrics (nil: no such route) and counts
	// rejected events.
	Metrics *metrics.Metrics
	Log     *slog.Logger
	// Shed says which subscriptions ingest sheds, for health (nil: none).
	Shed interface {
		Shedding(subID string) (time.Time, bool)
	}
	// Keys checks tenant keys (nil: New makes one on Store). The node
	// shares it with its cluster, which forgets keys other nodes revoke.
	Keys *KeyCache
	// Limits bound what one tenant may ask (zero: no limit).
	Limits Limits
	// Outage is told of every call the store failed with ErrUnavailable or
	// ErrFull, and logs them (nil: they are answered, not logged).
	Outage *outage.Tracker
	// PublicURL is where people reach the dashboard, for portal links
	// (e.g. https://hooks.example.com); "" takes the request's host.
	PublicURL string
}

type Server struct {
	Config
	log *slog.Logger
	mux *routeMux
	// Tenants are never deleted, so a lookup that succeeded once holds:
	// this cache takes a read off every event's path. Deleting a tenant
	// must invalidate it. (Keys are cached by Config.Keys.)
	tenants sync.Map // tenant ID → true

	ingestRate *buckets // nil: no ingest rate limit
}

//go:embed openapi.json
var openAPI []byte

func New(cfg Config) *Server {
	s := &Server{Config: cfg, log: cfg.Log, mux: &routeMux{ServeMux: http.NewServeMux()}}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.Keys == nil {
		s.Keys = NewKeyCache(cfg.Store, s.log)
	}
	if cfg.Limits.IngestRate > 0 {
		s.ingestRate = newBuckets(cfg.Limits.IngestRate, cfg.Limits.IngestBurst, time.Now)
	}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(openAPI)
	})
	if cfg.Metrics != nil {
		// Admin only on this port, which tenants reach: hookd serve
		// --metrics-addr serves it without credentials on a listener of
		// its own, where only the operator's network reaches.
		s.mux.Handle("GET /metrics", s.adminOnly(cfg.Metrics.Handler()))
	}
	s.route("POST /v1/tenants", s.createTenant)
	s.routeCounted("POST /v1/events", s.createEvent, cfg.Metrics.EventRejected)
	s.route("GET /v1/events/{id}", s.getEvent)
	s.route("POST /v1/subscriptions", s.createSubscription)
	s.route("GET /v1/subscriptions", s.listSubscriptions)
	s.route("GET /v1/subscriptions/{id}", s.getSubscription)
	s.route("PATCH /v1/subscriptions/{id}", s.patchSubscription)
	s.route("DELETE /v1/subscriptions/{id}", s.deleteSubscription)
	s.route("POST /v1/subscriptions/{id}/rotate-secret", s.rotateSecret)
	s.route("POST /v1/subscriptions/{id}/test", s.testSubscription)
	s.route("GET /v1/subscriptions/{id}/deliveries", s.listDeliveries)
	s.route("GET /v1/subscriptions/{id}/health", s.subscriptionHealth)
	s.route("GET /v1/subscriptions/{id}/stats", s.subscriptionStats)
	s.route("GET /v1/stats", s.tenantStats)
	s.route("POST /v1/subscriptions/{id}/replay", s.replaySubscription)
	s.route("GET /v1/replays/{id}", s.getReplay)
	s.route("POST /v1/replays/{id}/cancel", s.cancelReplay)
	s.route("GET /v1/subscriptions/{id}/replays", s.listReplays)
	s.route("GET /v1/deliveries/{id}", s.getDelivery)
	s.route("POST /v1/deliveries/{id}/replay", s.replayDelivery)
	s.route("POST /v1/tenants/{id}/keys", s.createKey)
	s.route("GET /v1/tenants/{id}/keys", s.listKeys)
	s.route("DELETE /v1/tenants/{id}/keys/{key_id}", s.revokeKey)
	s.route("GET /v1/audit", s.listAudit)
	s.route("GET /v1/tenants", s.listTenants)
	s.route("GET /v1/failing", s.listFailing)
	s.route("GET /v1/events", s.listEvents)
	s.route("GET /v1/deliveries", s.listTenantDeliveries)
	s.route("GET /v1/event-types", s.listEventTypes)
	s.route("GET /v1/subscriptions/{id}/deliveries/count", s.countDeliveries)
	s.route("POST /v1/tenants/{id}/portal-link", s.createPortalLink)
	s.mux.HandleFunc("POST /portal/session", s.portalSession)
	s.route("DELETE /portal/session", s.endPortalSession)
	s.svixRoutes()
	s.mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		if allow := s.allowed(r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			s.writeError(w, r, began, &apiError{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
				Message: r.Method + " is not allowed on " + r.URL.Path + "; allowed: " + strings.Join(allow, ", ")})
			return
		}
		s.writeError(w, r, began, &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no such route: " + r.Method + " " + r.URL.Path})
	})
	return s
}

// allowed lists the methods that have a route at r's path: a known path
// asked with another method answers 405 with them, not 404.
func (s *Server) allowed(r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete} {
		probe := *r
		probe.Method = m
		if _, pattern := s.mux.Handler(&probe); pattern != "/v1/" && pattern != "" {
			allow = append(allow, m)
		}
	}
	return allow
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, svixRequest(r))
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.Ready != nil {
		if err := s.Ready(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": &apiError{Code: "not_ready", Message: err.Error()}})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// principal is who is calling: the admin, or one tenant's key (a portal
// session's, restricted: see portalDenied).
type principal struct {
	admin    bool
	tenantID string
	keyID    string
	portal   bool
}

// actor names the principal in the audit log.
func (p principal) actor() string {
	if p.admin {
		return audit.ActorAdmin
	}
	return p.keyID
}

type handler func(w http.ResponseWriter, r *http.Request, p principal) error

// route registers an authenticated handler; its error becomes the answer.
func (s *Server) route(pattern string, h handler) { s.routeCounted(pattern, h, nil) }

// routeCounted is route, and also tells rejected (nil: no one) the error
// code of every error answer, authentication failures included.
func (s *Server) routeCounted(pattern string, h handler, rejected func(code string)) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		p, err := s.authenticate(r.Context(), r.Header.Get("Authorization"))
		if err == nil {
			err = portalCheck(p, pattern)
		}
		if err == nil {
			err = badText(r)
		}
		if err == nil {
			err = badQuery(pattern, r.URL.RawQuery)
		}
		if err == nil {
			// The peer address as the connection has it: X-Forwarded-For
			// is anyone's to write, so it is not trusted.
			r = r.WithContext(audit.WithActor(r.Context(), audit.Actor{ID: p.actor(), Addr: r.RemoteAddr}))
			err = h(w, r, p)
		}
		if err != nil {
			code := s.writeError(w, r, began, err)
			if rejected != nil {
				rejected(code)
			}
		}
	})
}

// adminOnly serves h to the admin token: 401 without a valid token, 403
// to a tenant key (as on every admin-only route).
func (s *Server) adminOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		p, err := s.authenticate(r.Context(), r.Header.Get("Authorization"))
		if err == nil && !p.admin {
			err = errForbidden
		}
		if err != nil {
			s.writeError(w, r, began, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) authenticate(ctx context.Context, header string) (principal, error) {
	token, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || token == "" {
		return principal{}, errUnauthorized
	}
	if s.AdminToken != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.AdminToken)) == 1 {
		return principal{admin: true}, nil
	}
	key, ok, err := s.Keys.Lookup(ctx, HashKey(token))
	if err != nil {
		return principal{}, err
	}
	if !ok { // unknown, revoked or expired
		return principal{}, errUnauthorized
	}
	return principal{tenantID: key.TenantID, keyID: key.ID, portal: key.Scope == core.ScopePortal}, nil
}

// HashKey is how API keys are stored: only their SHA-256.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// tenantFor resolves which tenant a create or list acts on. The admin may
// name any existing tenant (default "default"); a tenant key only its own,
// and naming another answers 404 as if it did not exist.
func (s *Server) tenantFor(ctx context.Context, p principal, requested string) (string, error) {
	if !p.admin {
		if requested != "" && requested != p.tenantID {
			return "", &apiError{Status: http.StatusNotFound, Code: "not_found", Field: "tenant_id", Message: "tenant_id: no such tenant"}
		}
		return p.tenantID, nil
	}
	if requested == "" {
		requested = core.DefaultTenant
	}
	if _, ok := s.tenants.Load(requested); ok {
		return requested, nil
	}
	if _, err := s.Store.TenantGet(ctx, requested); err == store.ErrNotFound {
		return "", &apiError{Status: http.StatusNotFound, Code: "not_found", Field: "tenant_id", Message: "tenant_id: no such tenant"}
	} else if err != nil {
		return "", err
	}
	s.tenants.Store(requested, true)
	return requested, nil
}

// scope is the tenant filter for reads by ID: "" lets the admin see all.
func (p principal) scope() string {
	if p.admin {
		return ""
	}
	return p.tenantID
}
