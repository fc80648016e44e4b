package send

import (
	"encoding/json"
	"strconv"
	"time"

	"hookd/internal/core"
)

// Body returns what is POSTed for job to sub: the JSON envelope, the
// payload embedded byte for byte (json.Marshal would compact and re-escape
// it). An endpoint made through the Svix-compatible API gets the payload
// itself, as Svix sends it: receivers moving from Svix parse it unchanged.
func Body(sub *core.Subscription, job *core.Job) []byte {
	ev := &job.Event
	data := ev.Payload
	if len(data) == 0 {
		data = []byte("null")
	}
	if sub.SvixHeaders {
		return data
	}
	b := make([]byte, 0, len(data)+len(ev.ID)+len(ev.Type)+128)
	b = append(b, `{"id":`...)
	b = appendString(b, ev.ID)
	b = append(b, `,"type":`...)
	b = appendString(b, ev.Type)
	b = append(b, `,"timestamp":`...)
	b = appendString(b, ev.CreatedAt.UTC().Format(time.RFC3339))
	b = append(b, `,"data":`...)
	b = append(b, data...)
	if seq := job.Delivery.Sequence; seq > 0 {
		b = append(b, `,"sequence":`...)
		b = strconv.AppendInt(b, seq, 10)
		b = append(b, `,"ordering_key":`...)
		b = appendString(b, ev.OrderingKey)
	}
	return append(b, '}')
}

// appendString appends s as a JSON string. IDs and event types are plain
// printable ASCII and go in as they are; anything else takes json.Marshal's
// escaping (which also escapes <, > and & for HTML safety).
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
