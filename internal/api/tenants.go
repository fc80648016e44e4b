package api

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"regexp"
	"time"

	"hookd/internal/audit"
	"hookd/internal/core"
	"hookd/internal/store"
)

var tenantIDRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

type createTenantRequest struct {
	ID   *string `json:"id"` // absent: generated; "" is refused, as the pattern says
	Name string  `json:"name"`
}

func (s *Server) createTenant(w http.ResponseWriter, r *http.Request, p principal) error {
	if !p.admin {
		return errForbidden
	}
	var req createTenantRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	id := core.NewID("ten")
	if req.ID != nil {
		if !tenantIDRe.MatchString(*req.ID) {
			return errInvalid("id", "must be 1-64 lowercase letters, digits, _ or -")
		}
		id = *req.ID
	}
	if len(req.Name) > 200 {
		return errInvalid("name", "must be at most 200 characters")
	}
	if req.Name == "" {
		req.Name = id
	}
	key := NewAPIKey()
	now := time.Now().UTC()
	k := core.APIKey{ID: core.NewID("key"), TenantID: id, Hash: HashKey(key), Prefix: key[:keyPrefixLen], CreatedAt: now}
	ctx := audit.Record(r.Context(), audit.TenantCreate, id, map[string]any{"name": req.Name, "key_id": k.ID})
	err := s.Store.TenantCreate(ctx, core.Tenant{ID: id, Name: req.Name, CreatedAt: now}, k)
	if errors.Is(err, store.ErrConflict) {
		// A deleted tenant's ID too: its data stays until retention removes it.
		return &apiError{Status: http.StatusConflict, Code: "conflict", Field: "id",
			Message: "id: a tenant has it, or had it (a deleted tenant's ID is not given again)"}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]string{"id": id, "name": req.Name, "api_key": key})
	return nil
}

// NewAPIKey returns a fresh tenant key: shown once, stored only hashed.
func NewAPIKey() string { return NewToken("hk_") }

// NewToken returns prefix and 256 random bits, URL-safe.
func NewToken(prefix string) string {
	b := make([]byte, 32)
	rand.Read(b)
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

type tenantJSON struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// listTenants pages every tenant by ID, for an operator (the dashboard's
// tenant switcher).
func (s *Server) listTenants(w http.ResponseWriter, r *http.Request, p principal) error {
	if !p.admin {
		return errForbidden
	}
	q := r.URL.Query()
	limit, err := parseLimit(q.Get("limit"))
	if err != nil {
		return err
	}
	// The cursor is the last tenant's ID: anything no tenant could have is
	// not one this list gave.
	c := q.Get("cursor")
	if c != "" && !tenantIDRe.MatchString(c) && !isIDOf(c, "ten") {
		return errBadRequest("cursor", "is not a next_cursor this list gave")
	}
	page, err := s.Store.TenantList(r.Context(), store.TenantListParams{Cursor: c, Limit: limit})
	if err != nil {
		return err
	}
	writePage(w, page, func(t core.Tenant) tenantJSON { return tenantJSON{ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt} })
	return nil
}
