package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"hookd/internal/core"
	"hookd/internal/store"
)

// Event types document what endpoints may filter on; hookd matches
// without them. They are organisation-wide, as in Svix: every token reads
// them, only the admin token changes them.

type svixEventTypeJSON struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	Archived     bool            `json:"archived"`
	Deprecated   bool            `json:"deprecated"`
	GroupName    *string         `json:"groupName"`
	FeatureFlags []string        `json:"featureFlags"`
	Schemas      json.RawMessage `json:"schemas"`
	CreatedAt    time.Time       `json:"createdAt"`
	UpdatedAt    time.Time       `json:"updatedAt"`
}

func toSvixEventType(et core.EventType) svixEventTypeJSON {
	out := svixEventTypeJSON{Name: et.Name, Description: et.Description, Archived: et.Archived, Deprecated: et.Deprecated,
		GroupName: nullIfEmpty(et.GroupName), FeatureFlags: et.FeatureFlags, Schemas: json.RawMessage(et.Schemas),
		CreatedAt: et.CreatedAt, UpdatedAt: et.UpdatedAt}
	if len(out.FeatureFlags) == 0 {
		out.FeatureFlags = nil
	}
	if et.Schemas == nil {
		out.Schemas = json.RawMessage("null")
	}
	return out
}

// svixEventTypeIn is EventTypeIn, EventTypeUpdate and EventTypePatch.
type svixEventTypeIn struct {
	Name         *string        `json:"name"`
	Description  *string        `json:"description"`
	Archived     *bool          `json:"archived"`
	Deprecated   *bool          `json:"deprecated"`
	GroupName    jsontext.Value `json:"groupName"`
	FeatureFlags jsontext.Value `json:"featureFlags"`
	Schemas      jsontext.Value `json:"schemas"`
}

func (in svixEventTypeIn) apply(et *core.EventType, patch bool) error {
	next := *et
	if in.Description != nil || !patch {
		if in.Description == nil {
			return errInvalid("description", "is required")
		}
		if len(*in.Description) > 4096 {
			return errInvalid("description", "must be at most 4096 characters")
		}
		next.Description = *in.Description
	}
	if in.Archived != nil || !patch {
		next.Archived = in.Archived != nil && *in.Archived
	}
	if in.Deprecated != nil || !patch {
		next.Deprecated = in.Deprecated != nil && *in.Deprecated
	}
	var group string
	if set, _, err := optional("groupName", in.GroupName, &group); err != nil {
		return err
	} else if set || !patch {
		if len(group) > 256 {
			return errInvalid("groupName", "must be at most 256 characters")
		}
		next.GroupName = group
	}
	var flags []string
	if set, _, err := optional("featureFlags", in.FeatureFlags, &flags); err != nil {
		return err
	} else if set || !patch {
		next.FeatureFlags = flags
	}
	if len(in.Schemas) > 0 || !patch {
		var schemas map[string]json.RawMessage
		if set, null, err := optional("schemas", in.Schemas, &schemas); err != nil {
			return errInvalid("schemas", "must be an object or null")
		} else if !set || null {
			next.Schemas = nil
		} else {
			if len(in.Schemas) > 64<<10 {
				return errInvalid("schemas", "must be at most 65536 bytes")
			}
			next.Schemas = []byte(in.Schemas)
		}
	}
	*et = next
	return nil
}

func (s *Server) svixListEventTypes(w http.ResponseWriter, r *http.Request, p principal) error {
	limit, iter, err := svixList(r)
	if err != nil {
		return err
	}
	page, err := s.Store.EventTypeList(r.Context(), store.EventTypeListParams{Cursor: iter, Limit: limit,
		IncludeArchived: r.URL.Query().Get("include_archived") == "true"})
	if err != nil {
		return err
	}
	svixPage(w, page, limit, toSvixEventType)
	return nil
}

func (s *Server) svixCreateEventType(w http.ResponseWriter, r *http.Request, p principal) error {
	if !p.admin {
		return errForbidden
	}
	var in svixEventTypeIn
	if err := svixDecode(w, r, &in); err != nil {
		return err
	}
	if in.Name == nil {
		return errInvalid("name", "is required")
	}
	return s.svixAddEventType(w, r, *in.Name, in)
}

// svixAddEventType creates an event type named as hookd names event types
// (dotted lowercase): one that could never be posted documents nothing.
func (s *Server) svixAddEventType(w http.ResponseWriter, r *http.Request, name string, in svixEventTypeIn) error {
	if err := core.ValidateEventType("name", name); err != nil {
		return err
	}
	et := core.EventType{Name: name}
	if err := in.apply(&et, false); err != nil {
		return err
	}
	now := time.Now().UTC()
	et.CreatedAt, et.UpdatedAt = now, now
	if err := s.Store.EventTypeCreate(r.Context(), et); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return &apiError{Status: http.StatusConflict, Code: "conflict", Field: "name", Message: "name: the event type exists"}
		}
		return err
	}
	writeJSON(w, http.StatusCreated, toSvixEventType(et))
	return nil
}

func (s *Server) svixGetEventType(w http.ResponseWriter, r *http.Request, p principal) error {
	et, err := s.Store.EventTypeGet(r.Context(), r.PathValue("event_type_name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSvixEventType(et))
	return nil
}

// svixUpdateEventType replaces an event type, or creates it (201).
func (s *Server) svixUpdateEventType(w http.ResponseWriter, r *http.Request, p principal) error {
	return s.svixChangeEventType(w, r, p, false)
}

func (s *Server) svixPatchEventType(w http.ResponseWriter, r *http.Request, p principal) error {
	return s.svixChangeEventType(w, r, p, true)
}

func (s *Server) svixChangeEventType(w http.ResponseWriter, r *http.Request, p principal, patch bool) error {
	if !p.admin {
		return errForbidden
	}
	var in svixEventTypeIn
	if err := svixDecode(w, r, &in); err != nil {
		return err
	}
	name := r.PathValue("event_type_name")
	et, err := s.Store.EventTypeGet(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) && !patch {
		return s.svixAddEventType(w, r, name, in)
	}
	if err != nil {
		return err
	}
	if err := in.apply(&et, patch); err != nil {
		return err
	}
	et.UpdatedAt = time.Now().UTC()
	if err := s.Store.EventTypeUpdate(r.Context(), et); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSvixEventType(et))
	return nil
}

// svixDeleteEventType archives an event type, as Svix does; with
// ?expunge=true it is removed.
func (s *Server) svixDeleteEventType(w http.ResponseWriter, r *http.Request, p principal) error {
	if !p.admin {
		return errForbidden
	}
	name := r.PathValue("event_type_name")
	if r.URL.Query().Get("expunge") == "true" {
		if err := s.Store.EventTypeDelete(r.Context(), name); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	et, err := s.Store.EventTypeGet(r.Context(), name)
	if err != nil {
		return err
	}
	et.Archived, et.UpdatedAt = true, time.Now().UTC()
	if err := s.Store.EventTypeUpdate(r.Context(), et); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
