package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"hookd/internal/audit"
	"hookd/internal/core"
	"hookd/internal/store"
)

// An application is a tenant. A uid that is a valid tenant ID
// ([a-z0-9][a-z0-9_-]{0,63}) is the tenant's ID; any other (Svix allows
// upper case, dots and 256 characters) is kept beside a generated
// app_… ID, and either finds the application.

type svixAppJSON struct {
	ID        string  `json:"id"`
	UID       *string `json:"uid"`
	Name      string  `json:"name"`
	RateLimit *int    `json:"rateLimit"`
	// rateLimit under the name Svix's newer clients read (npm svix 2.x).
	ThrottleRate *int              `json:"throttleRate"`
	Metadata     map[string]string `json:"metadata"`
	CreatedAt    time.Time         `json:"createdAt"`
	UpdatedAt    time.Time         `json:"updatedAt"`
}

func toSvixApp(t core.Tenant) svixAppJSON {
	updated := t.UpdatedAt
	if updated.IsZero() {
		updated = t.CreatedAt
	}
	return svixAppJSON{ID: t.ID, UID: nullIfEmpty(t.UID), Name: t.Name, RateLimit: nullIfZero(t.RateLimit),
		ThrottleRate: nullIfZero(t.RateLimit), Metadata: orEmptyMap(t.Metadata), CreatedAt: t.CreatedAt, UpdatedAt: updated}
}

// svixAppIn is ApplicationIn and ApplicationPatch: uid and rateLimit may
// be null in a patch.
type svixAppIn struct {
	Name      *string            `json:"name"`
	UID       jsontext.Value     `json:"uid"`
	RateLimit jsontext.Value     `json:"rateLimit"`
	Metadata  *map[string]string `json:"metadata"`
	// rateLimit's newer name (npm svix 2.x sends only this one).
	ThrottleRate jsontext.Value `json:"throttleRate"`
}

// apply validates in and sets it on t (whole: absent fields are cleared,
// as by create and PUT; patch: only those given).
func (in svixAppIn) apply(t *core.Tenant, patch bool) error {
	next := *t
	if in.Name != nil || !patch {
		if in.Name == nil || *in.Name == "" {
			return errInvalid("name", "is required")
		}
		if len(*in.Name) > 200 {
			return errInvalid("name", "must be at most 200 characters")
		}
		next.Name = *in.Name
	}
	var uid string
	if set, _, err := optional("uid", in.UID, &uid); err != nil {
		return err
	} else if set || !patch {
		if uid != "" {
			if err := svixUID("uid", uid); err != nil {
				return err
			}
		}
		next.UID = uid
	}
	raw, rateName, err := alias("rateLimit", in.RateLimit, "throttleRate", in.ThrottleRate)
	if err != nil {
		return err
	}
	var rate int
	if set, _, err := optional(rateName, raw, &rate); err != nil {
		return err
	} else if set || !patch {
		if err := svixRateLimit(rateName, rate); err != nil {
			return err
		}
		next.RateLimit = rate
	}
	if in.Metadata != nil || !patch {
		var m map[string]string
		if in.Metadata != nil {
			m = *in.Metadata
		}
		if err := svixMetadata(m); err != nil {
			return err
		}
		next.Metadata = m
	}
	*t = next
	return nil
}

func (s *Server) svixListApps(w http.ResponseWriter, r *http.Request, p principal) error {
	limit, iter, err := svixList(r)
	if err != nil {
		return err
	}
	// Filters hookd does not apply are refused, not ignored: a list that
	// looks filtered and is not misleads the caller.
	for _, n := range []string{"exclude_apps_with_no_endpoints", "exclude_apps_with_disabled_endpoints", "exclude_apps_with_svix_play_endpoints"} {
		if r.URL.Query().Get(n) == "true" {
			return errNotImplemented("filtering by " + n)
		}
	}
	if !p.admin { // a tenant key's organisation is its own application
		t, err := s.Store.TenantGet(r.Context(), p.tenantID)
		if err != nil {
			return err
		}
		page := store.Page[core.Tenant]{}
		if iter < t.ID {
			page.Data = []core.Tenant{t}
		}
		svixPage(w, page, limit, toSvixApp)
		return nil
	}
	page, err := s.Store.TenantList(r.Context(), store.TenantListParams{Cursor: iter, Limit: limit})
	if err != nil {
		return err
	}
	svixPage(w, page, limit, toSvixApp)
	return nil
}

// svixCreateApp creates an application (admin only, as POST /v1/tenants);
// ?get_if_exists=true answers the one with the same uid instead of 409.
func (s *Server) svixCreateApp(w http.ResponseWriter, r *http.Request, p principal) error {
	if !p.admin {
		return errForbidden
	}
	var in svixAppIn
	if err := svixDecode(w, r, &in); err != nil {
		return err
	}
	var t core.Tenant
	if err := in.apply(&t, false); err != nil {
		return err
	}
	getIfExists := r.URL.Query().Get("get_if_exists") == "true"
	if t.UID != "" {
		existing, err := s.svixApp(r.Context(), p, t.UID)
		switch {
		case err == nil && getIfExists:
			writeJSON(w, http.StatusOK, toSvixApp(existing))
			return nil
		case err == nil:
			return &apiError{Status: http.StatusConflict, Code: "conflict", Field: "uid", Message: "uid: an application has it already"}
		case !errors.Is(err, store.ErrNotFound):
			return err
		}
	}
	if err := s.svixAddApp(r.Context(), &t); err != nil {
		// Another call made it meanwhile: getOrCreate from several workers
		// at once is how clients create an application lazily.
		var ae *apiError
		if getIfExists && errors.As(err, &ae) && ae.Status == http.StatusConflict {
			if existing, gerr := s.svixApp(r.Context(), p, t.UID); gerr == nil {
				writeJSON(w, http.StatusOK, toSvixApp(existing))
				return nil
			}
		}
		return err
	}
	writeJSON(w, http.StatusCreated, toSvixApp(t))
	return nil
}

// svixAddApp creates t as a new tenant, with no key (the admin token, or
// a key from POST /v1/tenants/{id}/keys, acts on it).
func (s *Server) svixAddApp(ctx context.Context, t *core.Tenant) error {
	newID := func() string { return "app_" + strings.ToLower(strings.TrimPrefix(core.NewID("app"), "app_")) }
	t.ID = newID()
	if tenantIDRe.MatchString(t.UID) {
		t.ID = t.UID
	}
	now := time.Now().UTC()
	t.CreatedAt, t.UpdatedAt = now, now
	create := func() error {
		return s.Store.TenantCreate(audit.Record(ctx, audit.TenantCreate, t.ID, map[string]any{"name": t.Name, "api": "svix"}),
			*t, core.APIKey{})
	}
	err := create()
	if errors.Is(err, store.ErrConflict) && t.ID == t.UID && s.deletedTenant(ctx, t.UID) {
		// The uid names a deleted application's ID, never given again (its
		// messages stay for retention): the new one gets an ID of its own,
		// and the uid reaches it.
		t.ID = newID()
		err = create()
	}
	if errors.Is(err, store.ErrConflict) {
		return &apiError{Status: http.StatusConflict, Code: "conflict", Field: "uid", Message: "uid: an application has it already"}
	}
	return err
}

// deletedTenant reports whether ref is neither a live tenant's ID nor a
// live application's uid: what is left of a conflict on an ID is a
// deleted tenant's.
func (s *Server) deletedTenant(ctx context.Context, ref string) bool {
	_, err := s.Store.TenantGet(ctx, ref)
	if !errors.Is(err, store.ErrNotFound) {
		return false
	}
	_, err = s.Store.TenantByUID(ctx, ref)
	return errors.Is(err, store.ErrNotFound)
}

func (s *Server) svixGetApp(w http.ResponseWriter, r *http.Request, p principal) error {
	t, err := s.svixApp(r.Context(), p, r.PathValue("app_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSvixApp(t))
	return nil
}

// svixUpdateApp replaces an application's fields, or creates it (201,
// admin only) with {app_id} as its uid.
func (s *Server) svixUpdateApp(w http.ResponseWriter, r *http.Request, p principal) error {
	var in svixAppIn
	if err := svixDecode(w, r, &in); err != nil {
		return err
	}
	t, err := s.svixApp(r.Context(), p, r.PathValue("app_id"))
	if errors.Is(err, store.ErrNotFound) && p.admin {
		t = core.Tenant{}
		if err := in.apply(&t, false); err != nil {
			return err
		}
		if t.UID == "" {
			t.UID = r.PathValue("app_id")
		}
		if err := svixUID("app_id", t.UID); err != nil {
			return err
		}
		if err := s.svixAddApp(r.Context(), &t); err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, toSvixApp(t))
		return nil
	}
	if err != nil {
		return err
	}
	return s.svixChangeApp(w, r, p, t, in, false)
}

func (s *Server) svixPatchApp(w http.ResponseWriter, r *http.Request, p principal) error {
	var in svixAppIn
	if err := svixDecode(w, r, &in); err != nil {
		return err
	}
	t, err := s.svixApp(r.Context(), p, r.PathValue("app_id"))
	if err != nil {
		return err
	}
	return s.svixChangeApp(w, r, p, t, in, true)
}

func (s *Server) svixChangeApp(w http.ResponseWriter, r *http.Request, p principal, t core.Tenant, in svixAppIn, patch bool) error {
	before := t
	if err := in.apply(&t, patch); err != nil {
		return err
	}
	if t.UID != "" && t.UID != t.ID {
		// A uid naming another tenant's ID would never be found by it.
		if other, err := s.svixApp(r.Context(), principal{admin: true}, t.UID); err == nil && other.ID != t.ID {
			return &apiError{Status: http.StatusConflict, Code: "conflict", Field: "uid", Message: "uid: an application has it already"}
		}
	}
	t.UpdatedAt = time.Now().UTC()
	ctx := audit.Record(r.Context(), audit.TenantUpdate, t.ID, map[string]any{"changed": audit.Changed(before, t, "UpdatedAt")})
	if err := s.Store.TenantUpdate(ctx, t); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return &apiError{Status: http.StatusConflict, Code: "conflict", Field: "uid", Message: "uid: an application has it already"}
		}
		return err
	}
	writeJSON(w, http.StatusOK, toSvixApp(t))
	return nil
}

// svixDeleteApp deletes an application (admin only): its endpoints
// through the subscription service, its keys revoked, then the tenant.
// Its messages and attempts stay for the retention window.
func (s *Server) svixDeleteApp(w http.ResponseWriter, r *http.Request, p principal) error {
	if !p.admin {
		return errForbidden
	}
	t, err := s.svixApp(r.Context(), p, r.PathValue("app_id"))
	if err != nil {
		return err
	}
	if t.ID == core.DefaultTenant {
		// What the admin token acts on without a tenant_id; a deleted ID is
		// never given again, so it could not come back.
		return &apiError{Status: http.StatusConflict, Code: "conflict",
			Message: "the default application is where the admin token's calls without a tenant_id go; it cannot be deleted"}
	}
	ctx := r.Context()
	for {
		page, err := s.Store.SubscriptionList(ctx, store.SubscriptionListParams{TenantID: t.ID, Limit: 100})
		if err != nil {
			return err
		}
		for _, sub := range page.Data {
			if err := s.Subs.Delete(ctx, t.ID, sub.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		if page.NextCursor == "" {
			break
		}
	}
	for cursor := ""; ; {
		page, err := s.Store.APIKeyList(ctx, store.APIKeyListParams{TenantID: t.ID, Cursor: cursor, Limit: 100})
		if err != nil {
			return err
		}
		for _, k := range page.Data {
			if !k.RevokedAt.IsZero() {
				continue
			}
			kctx := audit.Record(ctx, audit.KeyRevoke, k.ID, map[string]any{"tenant_deleted": t.ID})
			if _, err := s.Store.APIKeyRevoke(kctx, t.ID, k.ID, time.Now().UTC()); err != nil && !errors.Is(err, store.ErrConflict) {
				return err
			}
			s.Keys.Forget(k.ID)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if err := s.Store.TenantDelete(audit.Record(ctx, audit.TenantDelete, t.ID, nil), t.ID, time.Now().UTC()); err != nil {
		return err
	}
	s.tenants.Delete(t.ID)
	w.WriteHeader(http.StatusNoContent)
	return nil
}
