package subs

import (
	"slices"
	"testing"
	"time"

	"hookd/internal/core"
)

func ids(ss []*core.Subscription) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.ID
	}
	return out
}

func TestMatch(t *testing.T) {
	r := New([]core.Subscription{
		{ID: "s1", TenantID: "t", EventTypes: []string{"order.created"}},
		{ID: "s2", TenantID: "t", EventTypes: []string{"order.*"}},
		{ID: "s3", TenantID: "t", EventTypes: []string{"*"}},
		{ID: "s4", TenantID: "t", EventTypes: []string{"order.*", "order.created"}}, // matched once
		{ID: "s5", TenantID: "other", EventTypes: []string{"*"}},
		{ID: "s6", TenantID: "t", EventTypes: []string{"order.refund.*"}},
	})
	for _, c := range []struct {
		typ  string
		want []string
	}{
		{"order.created", []string{"s1", "s2", "s3", "s4"}},
		{"order.refund.issued", []string{"s2", "s3", "s4", "s6"}},
		{"order", []string{"s3"}},
		{"orders.created", []string{"s3"}},
		{"payment.succeeded", []string{"s3"}},
	} {
		if got := ids(r.Match("t", c.typ)); !slices.Equal(got, c.want) {
			t.Errorf("Match(t, %s) = %v, want %v", c.typ, got, c.want)
		}
	}
	if got := r.Match("nobody", "order.created"); len(got) != 0 {
		t.Errorf("unknown tenant matched %v", ids(got))
	}
}

func TestPutAndRemoveKeepIndexCurrent(t *testing.T) {
	r := New(nil)
	r.Put(core.Subscription{ID: "s1", TenantID: "t", EventTypes: []string{"a.b"}})
	if got := ids(r.Match("t", "a.b")); !slices.Equal(got, []string{"s1"}) {
		t.Fatalf("after Put: %v", got)
	}
	// Changing patterns drops the old ones.
	r.Put(core.Subscription{ID: "s1", TenantID: "t", EventTypes: []string{"c.*"}})
	if got := r.Match("t", "a.b"); len(got) != 0 {
		t.Errorf("old pattern still matches: %v", ids(got))
	}
	if got := ids(r.Match("t", "c.d")); !slices.Equal(got, []string{"s1"}) {
		t.Errorf("new pattern: %v", got)
	}
	r.Remove("s1")
	if got := r.Match("t", "c.d"); len(got) != 0 {
		t.Errorf("removed subscription matches: %v", ids(got))
	}
	if _, ok := r.Get("s1"); ok {
		t.Error("Get finds a removed subscription")
	}
}

// Two changes whose store writes interleave can reach Put out of order (a
// disable whose skip runs in batches, then a pause): the newer one stays.
func TestPutKeepsTheNewerVersion(t *testing.T) {
	r := New(nil)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	r.Put(core.Subscription{ID: "s1", TenantID: "t", EventTypes: []string{"a.b"}, State: core.SubPaused, UpdatedAt: t0.Add(time.Second)})
	r.Put(core.Subscription{ID: "s1", TenantID: "t", EventTypes: []string{"a.b"}, State: core.SubDisabled, UpdatedAt: t0})
	if s, _ := r.Get("s1"); s.State != core.SubPaused {
		t.Errorf("after an older Put the registry says %s, want the newer paused", s.State)
	}
	r.Put(core.Subscription{ID: "s1", TenantID: "t", EventTypes: []string{"a.b"}, State: core.SubActive, UpdatedAt: t0.Add(time.Second)})
	if s, _ := r.Get("s1"); s.State != core.SubActive {
		t.Errorf("a Put as new as the held one is ignored: %s", s.State)
	}
}

func BenchmarkMatch(b *testing.B) {
	var list []core.Subscription
	for i := range 10000 {
		list = append(list, core.Subscription{ID: core.NewID("sub"), TenantID: "t",
			EventTypes: []string{[]string{"order.created", "order.*", "payment.succeeded", "invoice.*"}[i%4]}})
	}
	r := New(list)
	b.ReportAllocs()
	for b.Loop() {
		r.Match("t", "payment.succeeded")
	}
}
