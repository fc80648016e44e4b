package core

import (
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
	} {
		got, err := EndpointHost("url", raw)
		if err != nil || got != want {
			t.Errorf("EndpointHost(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for _, raw := range []string{"", "ftp://x.com", "/relative", "http://", "http://x.com/#frag", "javascript:alert(1)"} {
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
