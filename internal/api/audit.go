package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"hookd/internal/audit"
	"hookd/internal/core"
	"hookd/internal/store"
)

type auditJSON struct {
	ID         string          `json:"id"`
	At         time.Time       `json:"at"`
	TenantID   string          `json:"tenant_id"`
	Actor      string          `json:"actor"`
	Action     string          `json:"action"`
	TargetID   string          `json:"target_id"`
	RemoteAddr string          `json:"remote_addr"`
	Detail     json.RawMessage `json:"detail"`
}

// listAudit pages the audit log newest first: a tenant key sees its own
// tenant's entries, the admin every tenant's or tenant_id's.
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	cursor, err := idCursor(q, "aud")
	if err != nil {
		return err
	}
	params := store.AuditListParams{Cursor: cursor}
	if params.Limit, err = parseLimit(q.Get("limit")); err != nil {
		return err
	}
	if a := q.Get("action"); a != "" {
		if !audit.Known(a) {
			return errBadRequest("action", "must be one of "+strings.Join(audit.Actions, ", "))
		}
		params.Action = a
	}
	if params.Since, err = queryTime(q, "since"); err != nil {
		return err
	}
	if params.Until, err = queryTime(q, "until"); err != nil {
		return err
	}
	if t := q.Get("tenant_id"); t != "" || !p.admin {
		if params.TenantID, err = s.tenantFor(r.Context(), p, t); err != nil {
			return err
		}
	}
	page, err := s.Store.AuditList(r.Context(), params)
	if err != nil {
		return err
	}
	writePage(w, page, func(e core.AuditEntry) auditJSON {
		out := auditJSON{ID: e.ID, At: e.At, TenantID: e.TenantID, Actor: e.Actor, Action: e.Action,
			TargetID: e.TargetID, RemoteAddr: e.RemoteAddr, Detail: json.RawMessage(e.Detail)}
		if len(out.Detail) == 0 {
			out.Detail = json.RawMessage("{}")
		}
		// A tenant sees where its own keys acted from, not the operator's
		// addresses.
		if !p.admin && (e.Actor == audit.ActorAdmin || e.Actor == audit.ActorHookd) {
			out.RemoteAddr = ""
		}
		return out
	})
	return nil
}
