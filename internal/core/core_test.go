package core

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestNewIDIsUniqueAndSortsByCreation(t *testing.T) {
	var ids []string
	seen := map[string]bool{}
	for range 10000 {
		id := NewID("evt")
		if seen[id] {
			t.Fatalf("duplicate id %s", id)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	if !sort.StringsAreSorted(ids) {
		t.Error("ids made in sequence do not sort in sequence")
	}
	if !strings.HasPrefix(ids[0], "evt_") || len(ids[0]) != 4+26 {
		t.Errorf("id shape %q", ids[0])
	}
}

func TestEndpointHost(t *testing.T) {
	for raw, want := range map[string]string{
		"https://Example.COM/hook":      "example.com:443",
		"http://example.com/hook":       "example.com:80",
		"http://example.com:8080/x?y=1": "example.com:8080",
		"http://[::1]:9000/":            "[::1]:9000",
		"http://api.0day.example/":      "api.0day.example:80",
		// Spellings of one server are one host, so they share its cap.
		"https://Example.COM./hook":     "example.com:443",
		"http://example.com:/":          "example.com:80",
		"http://[2001:DB8:0::1]:9000/":  "[2001:db8::1]:9000",
		"http://[::ffff:8.8.8.8]:9000/": "[::ffff:8.8.8.8]:9000",
	} {
		got, err := EndpointHost("url", raw)
		if err != nil || got != want {
			t.Errorf("EndpointHost(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for _, raw := range []string{"", "ftp://x.com", "/relative", "http://", "http://x.com/#frag", "javascript:alert(1)",
		"http://[fe80::1%25eth0]/", "http://[fe80::1%25eth0]:0]:90", // IPv6 zones
		"http://x.com/hook?a=b HTTP/1.0", "http://x.com/caf\u00e9", "http://x.com/\x7f", // sent raw in the request line
		"http://127.1:9000/", "http://0x7f000001/", "http://2130706433/", "http://127.0.0.1./", "http://a.b.0X1F/", "http://1.2.3.4.5/"} { // IPv4 as no dialler reads it
		if _, err := EndpointHost("url", raw); err == nil {
			t.Errorf("EndpointHost(%q) accepted", raw)
		}
	}
}

func TestPatterns(t *testing.T) {
	if err := ValidatePatterns("event_types", []string{"a.b", "a.*", "*", "x_y-z.w"}); err != nil {
		t.Error(err)
	}
	for _, bad := range [][]string{nil, {""}, {"A.b"}, {"a.*.b"}, {"a."}, {".*"}, {"a b"}} {
		if err := ValidatePatterns("event_types", bad); err == nil {
			t.Errorf("ValidatePatterns(%q) accepted", bad)
		}
	}
	for _, c := range []struct {
		p, t string
		want bool
	}{{"*", "a.b", true}, {"a.*", "a.b", true}, {"a.*", "a.b.c", true}, {"a.*", "ab.c", false}, {"a.b", "a.b", true}, {"a.b", "a.bc", false}} {
		if got := Matches(c.p, c.t); got != c.want {
			t.Errorf("Matches(%q, %q) = %v", c.p, c.t, got)
		}
	}
}

func TestRetrySchedule(t *testing.T) {
	got, err := ParseRetrySchedule("retry_schedule", []string{"5s", "1m", "2h"})
	if err != nil || len(got) != 3 || got[1] != time.Minute {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range [][]string{{"1ms"}, {"25h"}, {"soon"}, make([]string, 21)} {
		if _, err := ParseRetrySchedule("retry_schedule", bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	var total time.Duration
	for _, d := range DefaultRetrySchedule {
		total += d
	}
	if len(DefaultRetrySchedule)+1 != 8 || total < 20*time.Hour || total > 22*time.Hour {
		t.Errorf("default: %d tries over %s, want 8 over about 21h", len(DefaultRetrySchedule)+1, total)
	}
}

func TestJitterStaysWithin20Percent(t *testing.T) {
	lo, hi := time.Hour, time.Duration(0)
	for range 10000 {
		d := Jitter(10 * time.Second)
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < 8*time.Second || hi > 12*time.Second {
		t.Errorf("jitter range %s..%s, want within 8s..12s", lo, hi)
	}
	if hi-lo < 3*time.Second {
		t.Errorf("jitter range %s..%s barely spreads", lo, hi)
	}
}

// A URL carrying credentials is refused, pointing to headers.
func TestEndpointHostRefusesUserinfo(t *testing.T) {
	for _, raw := range []string{"http://alice:s3cr3t@example.com/hook", "https://token@example.com/", "http://:pw@example.com/"} {
		_, err := EndpointHost("url", raw)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "url" || !strings.Contains(fe.Message, "headers") {
			t.Errorf("EndpointHost(%q) = %v, want a url error pointing to headers", raw, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("the error repeats the password: %v", err)
		}
	}
	if _, err := EndpointHost("url", "https://example.com/a@b?c=d@e"); err != nil {
		t.Errorf("an @ in the path or query is not userinfo: %v", err)
	}
}

func TestValidateHeaders(t *testing.T) {
	got, err := ValidateHeaders("headers", map[string]string{"authorization": "Bearer t0k", "X-API-key": "k\tv", "X-Empty": ""})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"Authorization": "Bearer t0k", "X-Api-Key": "k\tv", "X-Empty": ""}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ValidateHeaders = %v, want %v (canonical names)", got, want)
	}
	if got, err := ValidateHeaders("headers", map[string]string{}); err != nil || len(got) != 0 {
		t.Fatalf("no headers: %v, %v", got, err)
	}

	many := map[string]string{}
	for i := range MaxHeaders + 1 {
		many[fmt.Sprintf("X-H%d", i)] = "v"
	}
	for _, c := range []struct {
		name  string
		in    map[string]string
		field string
		says  string
	}{
		{"webhook-*", map[string]string{"Webhook-Signature": "v1,x"}, "headers.Webhook-Signature", "set by hookd"},
		{"svix-*", map[string]string{"svix-signature": "v1,FORGED"}, "headers.svix-signature", "set by hookd"},
		{"content-type", map[string]string{"content-type": "text/plain"}, "headers.content-type", "set by hookd"},
		{"content-length", map[string]string{"Content-Length": "1"}, "headers.Content-Length", "set by hookd"},
		{"host", map[string]string{"Host": "internal"}, "headers.Host", "set by hookd"},
		{"user-agent", map[string]string{"User-Agent": "x"}, "headers.User-Agent", "set by hookd"},
		{"connection", map[string]string{"Connection": "close"}, "headers.Connection", "hop-by-hop"},
		{"keep-alive", map[string]string{"Keep-Alive": "1"}, "headers.Keep-Alive", "hop-by-hop"},
		{"proxy-*", map[string]string{"Proxy-Authorization": "x"}, "headers.Proxy-Authorization", "hop-by-hop"},
		{"te", map[string]string{"TE": "trailers"}, "headers.TE", "hop-by-hop"},
		{"trailer", map[string]string{"Trailer": "x"}, "headers.Trailer", "hop-by-hop"},
		{"transfer-encoding", map[string]string{"Transfer-Encoding": "chunked"}, "headers.Transfer-Encoding", "hop-by-hop"},
		{"upgrade", map[string]string{"Upgrade": "h2c"}, "headers.Upgrade", "hop-by-hop"},
		{"space in name", map[string]string{"X Key": "v"}, "headers.X Key", "not a valid header name"},
		{"colon in name", map[string]string{"X-Key:": "v"}, "headers.X-Key:", "not a valid header name"},
		{"empty name", map[string]string{"": "v"}, "headers.", "not a valid header name"},
		{"CRLF in value", map[string]string{"X-Key": "v\r\nX-Evil: 1"}, "headers.X-Key", "control characters"},
		{"LF in value", map[string]string{"X-Key": "v\nx"}, "headers.X-Key", "control characters"},
		{"NUL in value", map[string]string{"X-Key": "v\x00"}, "headers.X-Key", "control characters"},
		{"twice", map[string]string{"X-Key": "a", "x-key": "b"}, "headers.x-key", "twice"},
		{"too many", many, "headers", "at most 20 headers"},
		{"too big", map[string]string{"X-Big": strings.Repeat("a", MaxHeadersBytes)}, "headers", "at most 4096 bytes"},
	} {
		_, err := ValidateHeaders("headers", c.in)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(fe.Message, c.says) {
			t.Errorf("%s: %v, want field %q saying %q", c.name, err, c.field, c.says)
		}
	}
}

func TestIDTimeReadsTheMillisecond(t *testing.T) {
	before := time.Now().Truncate(time.Millisecond)
	id := NewID("dlv")
	after := time.Now()
	got, ok := IDTime(id)
	if !ok || got.Before(before) || got.After(after) {
		t.Fatalf("IDTime(%s) = %v, %v; want a time from %v to %v", id, got, ok, before, after)
	}
	for _, bad := range []string{"", "dlv", "dlv_x", "dlv_01M8SP97GHQFVKZHX0X4ZQN9Q", "dlv_01M8SP97GHQFVKZHX0X4ZQN9QU", "dlv_81M8SP97GHQFVKZHX0X4ZQN9QS"} {
		if _, ok := IDTime(bad); ok {
			t.Errorf("IDTime(%q) ok, want not an ID", bad)
		}
	}
}

// The partitions of the PostgreSQL store are ranges of IDs between floors:
// every ID made in [t, u) must sort in [IDFloor(t), IDFloor(u)).
func TestIDFloorBoundsTheIDsOfItsTime(t *testing.T) {
	before := time.Now()
	id := NewID("evt")
	after := time.Now().Add(time.Millisecond)
	if lo, hi := IDFloor("evt", before), IDFloor("evt", after); id < lo || id >= hi {
		t.Fatalf("NewID made %s, outside [%s, %s)", id, lo, hi)
	}
	at, _ := IDTime(id)
	if next := IDFloor("evt", at.Add(time.Millisecond)); id >= next {
		t.Errorf("%s sorts at or after the floor of the next millisecond, %s", id, next)
	}
	day := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	if got, ok := IDTime(IDFloor("dlv", day) + "0000000000000000"); !ok || !got.Equal(day) {
		t.Errorf("IDTime of the floor of %v = %v, %v", day, got, ok)
	}
}
