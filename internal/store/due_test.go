package store

import (
	"testing"
	"time"

	"hookd/internal/core"
)

// FirstDue orders by (next attempt, ID), keeps each delivery once even when
// two queries saw it at different times, and stops at limit.
func TestFirstDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	job := func(id string, at time.Duration) core.Job {
		return core.Job{Delivery: core.Delivery{ID: id, NextAttemptAt: t0.Add(at)}}
	}
	got := FirstDue([]core.Job{job("c", 0), job("b", time.Second), job("a", 0), job("c", 2*time.Second), job("d", 3*time.Second)}, 3)
	var ids []string
	for _, j := range got {
		ids = append(ids, j.Delivery.ID)
	}
	if want := "a c b"; len(ids) != 3 || ids[0]+" "+ids[1]+" "+ids[2] != want {
		t.Fatalf("FirstDue = %v, want %s", ids, want)
	}
}
