package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"hookd/internal/audit"
	"hookd/internal/core"
	"hookd/internal/store"
)

// Portal links sign a platform's customer into their own tenant's
// dashboard, as Svix's App Portal does: the platform asks for a link
// (admin, or the tenant's key), hands it to its customer, and the
// dashboard exchanges it once for a session key scoped to the tenant and
// the portal, expiring with the link. Threat model: docs/security.md.

// Portal link lifetimes: long enough to be opened, short enough that a
// link found later in a log or history is dead.
const (
	defaultPortalLink = time.Hour
	minPortalLink     = time.Minute
	maxPortalLink     = 24 * time.Hour
)

// portalDenied are the routes, of both APIs, a portal session may not
// call: a platform's customer reads and manages its endpoints and
// deliveries (rotating a secret shows the new one once), but does not
// post events in the platform's name, read a stored signing secret (with
// it a leaked link could sign forged events), hold keys, hand out links,
// read where the platform's own calls came from, or change its
// application or the organisation's event types. It is the one table:
// route and svixRoute both ask portalCheck.
var portalDenied = map[string]bool{
	// Posting events.
	"POST /v1/events":               true,
	"POST /api/v1/app/{app_id}/msg": true,
	// Reading a stored signing secret.
	"GET /api/v1/app/{app_id}/endpoint/{endpoint_id}/secret": true,
	// Keys and links: credentials that outlive the session.
	"POST /v1/tenants/{id}/keys":                   true,
	"GET /v1/tenants/{id}/keys":                    true,
	"DELETE /v1/tenants/{id}/keys/{key_id}":        true,
	"POST /v1/tenants/{id}/portal-link":            true,
	"POST /api/v1/auth/app-portal-access/{app_id}": true,
	// The platform's audit log.
	"GET /v1/audit": true,
	// Applications (tenants) and event types (organisation-wide).
	"POST /api/v1/app":                            true,
	"PUT /api/v1/app/{app_id}":                    true,
	"PATCH /api/v1/app/{app_id}":                  true,
	"DELETE /api/v1/app/{app_id}":                 true,
	"POST /api/v1/event-type":                     true,
	"PUT /api/v1/event-type/{event_type_name}":    true,
	"PATCH /api/v1/event-type/{event_type_name}":  true,
	"DELETE /api/v1/event-type/{event_type_name}": true,
}

// portalCheck refuses p the route registered as pattern if p is a portal
// session and the route is one portalDenied names.
func portalCheck(p principal, pattern string) error {
	if p.portal && portalDenied[pattern] {
		return errPortalForbidden
	}
	return nil
}

var errPortalForbidden = &apiError{Status: http.StatusForbidden, Code: "forbidden",
	Message: "a portal session cannot do this: it reads and manages its tenant's endpoints and deliveries"}

var errPortalLink = &apiError{Status: http.StatusUnauthorized, Code: "unauthorized",
	Message: "this portal link is not valid: it was used already, or it has expired; ask for a new one"}

type portalLinkRequest struct {
	ExpiresIn *int `json:"expires_in"` // seconds
}

// createPortalLink makes a one-time link into tenant {id}'s dashboard.
func (s *Server) createPortalLink(w http.ResponseWriter, r *http.Request, p principal) error {
	tenant := r.PathValue("id")
	if !p.admin && tenant != p.tenantID {
		return errNotFound
	}
	var req portalLinkRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, &req); err != nil {
			return err
		}
	}
	life, err := portalLife("expires_in", req.ExpiresIn)
	if err != nil {
		return err
	}
	l, _, link, err := s.newPortalLink(r, tenant, life)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]any{"id": l.ID, "url": link, "expires_at": l.ExpiresAt})
	return nil
}

// portalLife is a link's lifetime asked for in seconds under field (nil:
// the default), bounded before it becomes a Duration, which a huge one
// would overflow.
func portalLife(field string, seconds *int) (time.Duration, error) {
	if seconds == nil {
		return defaultPortalLink, nil
	}
	if n := *seconds; n < int(minPortalLink/time.Second) || n > int(maxPortalLink/time.Second) {
		return 0, errInvalid(field, "must be from 60 to 86400 seconds (a minute to a day)")
	}
	return time.Duration(*seconds) * time.Second, nil
}

// newPortalLink makes and stores a one-time link into tenant's dashboard
// for life, and returns it, its token and its URL (for /v1 and Svix's
// app-portal-access alike).
func (s *Server) newPortalLink(r *http.Request, tenant string, life time.Duration) (core.PortalLink, string, string, error) {
	token := NewToken("pt_")
	now := time.Now().UTC()
	l := core.PortalLink{ID: core.NewID("ptl"), TenantID: tenant, Hash: HashKey(token), CreatedAt: now, ExpiresAt: now.Add(life)}
	ctx := audit.Record(r.Context(), audit.PortalLink, tenant, map[string]any{"link_id": l.ID, "expires_at": l.ExpiresAt})
	if err := s.Store.PortalLinkCreate(ctx, l); err != nil {
		return core.PortalLink{}, "", "", err
	}
	// The token rides in the fragment: browsers never send it to a server,
	// so it stays out of access logs, proxies and Referer headers.
	return l, token, s.publicBase(r) + "/ui/#/portal/" + token, nil
}

// publicBase is where the dashboard is reached: --public-url, or the
// address the caller used.
func (s *Server) publicBase(r *http.Request) string {
	if s.PublicURL != "" {
		return strings.TrimSuffix(s.PublicURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

type portalSessionRequest struct {
	Token string `json:"token"`
}

// portalSession exchanges a portal link's token, once, for a session key:
// scoped to its tenant and the portal, expiring with the link. It needs
// no bearer token: the link's token is the credential.
func (s *Server) portalSession(w http.ResponseWriter, r *http.Request) {
	began := time.Now()
	if err := s.exchangePortalLink(w, r); err != nil {
		s.writeError(w, r, began, err)
	}
}

func (s *Server) exchangePortalLink(w http.ResponseWriter, r *http.Request) error {
	var req portalSessionRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.Token == "" {
		return errInvalid("token", "is required: the part of the link after #/portal/")
	}
	secret := NewAPIKey()
	k := core.APIKey{ID: core.NewID("key"), Hash: HashKey(secret), Name: core.ScopePortal, Prefix: secret[:keyPrefixLen],
		CreatedAt: time.Now().UTC()}
	ctx := audit.WithActor(r.Context(), audit.Actor{ID: audit.ActorPortal, Addr: r.RemoteAddr})
	ctx = audit.Record(ctx, audit.PortalSession, k.ID, map[string]any{"key_id": k.ID})
	k, err := s.Store.PortalLinkRedeem(ctx, HashKey(req.Token), k.CreatedAt, k)
	if errors.Is(err, store.ErrNotFound) {
		return errPortalLink
	}
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, map[string]any{"api_key": secret, "tenant_id": k.TenantID, "expires_at": k.ExpiresAt})
	return nil
}

// endPortalSession is the dashboard's sign-out (and Svix's auth/logout):
// the calling portal session's key is revoked at once, rather than left
// valid until its link's expiry. Other keys are revoked by their owner
// (DELETE /v1/tenants/{id}/keys/{key_id}).
func (s *Server) endPortalSession(w http.ResponseWriter, r *http.Request, p principal) error {
	if err := noBody(w, r); err != nil {
		return err
	}
	if !p.portal {
		return &apiError{Status: http.StatusForbidden, Code: "forbidden",
			Message: "only a portal session signs out here; revoke a key with DELETE /v1/tenants/{id}/keys/{key_id}"}
	}
	_, err := s.Store.APIKeyRevoke(audit.Record(r.Context(), audit.KeyRevoke, p.keyID, nil), p.tenantID, p.keyID, time.Now().UTC())
	if err != nil && !errors.Is(err, store.ErrConflict) { // ErrConflict: revoked meanwhile
		return err
	}
	s.Keys.Forget(p.keyID)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// svixPortalAccess is Svix's app-portal-access: a portal link into the
// application's dashboard. url is the link to hand the customer; token is
// the link's one-time token (exchanged by POST /portal/session), not a
// bearer key as Svix's is. expiry (seconds) is a link's 60 to 86400,
// default an hour, where Svix allows up to 7 days; a read-only portal is
// refused (501): hookd's lets the customer manage its endpoints.
func (s *Server) svixPortalAccess(w http.ResponseWriter, r *http.Request, p principal) error {
	var in struct {
		Expiry   *int            `json:"expiry"`
		ReadOnly *bool           `json:"readOnly"`
		Caps     json.RawMessage `json:"capabilities"`
	}
	if r.ContentLength != 0 {
		if err := svixDecode(w, r, &in); err != nil {
			return err
		}
	}
	if in.ReadOnly != nil && *in.ReadOnly {
		return errNotImplemented("readOnly (a read-only portal)")
	}
	if len(in.Caps) > 0 && string(in.Caps) != "null" {
		return errNotImplemented("capabilities")
	}
	life, err := portalLife("expiry", in.Expiry)
	if err != nil {
		return err
	}
	app, err := s.svixApp(r.Context(), p, r.PathValue("app_id"))
	if err != nil {
		return err
	}
	_, token, link, err := s.newPortalLink(r, app.ID, life)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"url": link, "token": token})
	return nil
}
