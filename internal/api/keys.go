package api

import (
	"errors"
	"net/http"
	"time"

	"hookd/internal/audit"
	"hookd/internal/core"
	"hookd/internal/store"
)

// maxKeyLifetime bounds expires_at: a key meant to last longer than this
// should have no expiry (and be revoked when done).
const maxKeyLifetime = 10 * 365 * 24 * time.Hour

// keyPrefixLen is how much of a key its list shows: "hk_" and 4 of its 43
// random characters, enough to tell keys apart, far too little to guess one.
const keyPrefixLen = 7

type createKeyRequest struct {
	Name      string `json:"name"`
	ExpiresAt string `json:"expires_at"`
}

type keyJSON struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
	// Scope is tenant, or portal for a portal session's key.
	Scope string `json:"scope"`
}

type createdKeyJSON struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Prefix    string     `json:"prefix"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at"`
	APIKey    string     `json:"api_key"`
}

func toKeyJSON(k core.APIKey) keyJSON {
	scope := "tenant"
	if k.Scope != "" {
		scope = k.Scope
	}
	return keyJSON{ID: k.ID, Name: k.Name, Prefix: k.Prefix, CreatedAt: k.CreatedAt,
		LastUsedAt: timeOrNull(k.LastUsedAt), ExpiresAt: timeOrNull(k.ExpiresAt), RevokedAt: timeOrNull(k.RevokedAt), Scope: scope}
}

func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// createKey issues a tenant another key, shown only in this answer. The
// admin may issue one for any tenant, a tenant key for its own only.
func (s *Server) createKey(w http.ResponseWriter, r *http.Request, p principal) error {
	var req createKeyRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if len(req.Name) > 100 {
		return errInvalid("name", "must be at most 100 characters")
	}
	now := time.Now().UTC()
	var expires time.Time
	if req.ExpiresAt != "" {
		t, err := parseTime("expires_at", req.ExpiresAt, errInvalid)
		if err != nil {
			return err
		}
		if !t.After(now) || t.Sub(now) > maxKeyLifetime {
			return errInvalid("expires_at", "must be in the future and at most 10 years ahead (leave it out for no expiry)")
		}
		expires = t.UTC()
	}
	tenant, err := s.tenantFor(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	plain := NewAPIKey()
	k := core.APIKey{ID: core.NewID("key"), TenantID: tenant, Hash: HashKey(plain), Name: req.Name,
		Prefix: plain[:keyPrefixLen], CreatedAt: now, ExpiresAt: expires}
	detail := map[string]any{"name": k.Name}
	if !expires.IsZero() {
		detail["expires_at"] = expires
	}
	if err := s.Store.APIKeyCreate(audit.Record(r.Context(), audit.KeyCreate, k.ID, detail), k); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, createdKeyJSON{ID: k.ID, Name: k.Name, Prefix: k.Prefix, CreatedAt: k.CreatedAt,
		ExpiresAt: timeOrNull(k.ExpiresAt), APIKey: plain})
	return nil
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	limit, err := parseLimit(q.Get("limit"))
	if err != nil {
		return err
	}
	tenant, err := s.tenantFor(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	cursor, err := idCursor(q, "key")
	if err != nil {
		return err
	}
	page, err := s.Store.APIKeyList(r.Context(), store.APIKeyListParams{TenantID: tenant, Cursor: cursor, Limit: limit})
	if err != nil {
		return err
	}
	writePage(w, page, toKeyJSON)
	return nil
}

// revokeKey revokes a key at once: this node forgets it before answering,
// and the store tells the others. A tenant may revoke any of its keys,
// even the one it calls with and even its last: one that believes its key
// leaked must be able to stop it now. The admin can always issue another.
func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request, p principal) error {
	if err := noBody(w, r); err != nil {
		return err
	}
	tenant, err := s.tenantFor(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	id := r.PathValue("key_id")
	k, err := s.Store.APIKeyRevoke(audit.Record(r.Context(), audit.KeyRevoke, id, nil), tenant, id, time.Now().UTC())
	if errors.Is(err, store.ErrConflict) {
		return &apiError{Status: http.StatusConflict, Code: "conflict", Message: "the key is already revoked"}
	}
	if err != nil {
		return err
	}
	s.Keys.Forget(k.ID)
	w.WriteHeader(http.StatusNoContent)
	return nil
}
