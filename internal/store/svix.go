package store

import (
	"encoding/json"
	"fmt"

	"hookd/internal/core"
)

// svixFields is a subscription's subscriptions.svix column: what the
// Svix-compatible API keeps of an endpoint beside its uid.
type svixFields struct {
	Headers     bool              `json:"headers,omitempty"`
	Description string            `json:"description,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

// EncodeSvix is a subscription's svix column: "" for one made through /v1.
func EncodeSvix(s core.Subscription) string {
	f := svixFields{Headers: s.SvixHeaders, Description: s.Description, Metadata: s.Metadata}
	if !f.Headers && f.Description == "" && len(f.Metadata) == 0 {
		return ""
	}
	b, _ := json.Marshal(f) // strings and a bool: cannot fail
	return string(b)
}

// DecodeSvix sets what EncodeSvix stored on s.
func DecodeSvix(col string, s *core.Subscription) error {
	if col == "" {
		return nil
	}
	var f svixFields
	if err := json.Unmarshal([]byte(col), &f); err != nil {
		return fmt.Errorf("subscription %s svix: %w", s.ID, err)
	}
	s.SvixHeaders, s.Description, s.Metadata = f.Headers, f.Description, f.Metadata
	return nil
}

// EncodeMetadata is a metadata column: "" for none.
func EncodeMetadata(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// DecodeMetadata is the inverse of EncodeMetadata (nil for none).
func DecodeMetadata(col string) (map[string]string, error) {
	if col == "" {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(col), &m); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	return m, nil
}
