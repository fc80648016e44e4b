package store

import (
	"slices"
	"strings"

	"hookd/internal/core"
)

// A refill (DeliveryDue) takes a subscription's unordered rows from one
// walk, and the heads of its ordering keys from a walk of at most
// OrderedWalk of its due ordered rows. Behind a key whose head is in flight
// or retrying, every later row of the key waits, so past a short walk the
// heads come from one seek per key instead (OrderedShort): a backlog over a
// few keys costs a refill its keys, not its rows.

// OrderedWalk is how many due ordered rows a refill walks: room for the
// rows it may take, the ones in flight (excluded) ahead of them, and as
// many again.
func OrderedWalk(limit, excluded int) int { return 2*limit + excluded }

// OrderedShort reports whether a refill's first look found fewer than limit
// ordered heads among jobs: then, if its walk of the due ordered rows
// stopped short of them all, the rest of the heads come from a seek per key.
func OrderedShort(jobs []core.Job, limit int) bool {
	n := 0
	for _, j := range jobs {
		if j.Delivery.Sequence > 0 {
			n++
		}
	}
	return n < limit
}

// FirstDue is the first limit of jobs by (next attempt, ID), each once: the
// order one walk of every due row would give. A refill's queries see no
// common snapshot, so a row two of them return may differ between them:
// the first copy is kept.
func FirstDue(jobs []core.Job, limit int) []core.Job {
	seen := make(map[string]bool, len(jobs))
	jobs = slices.DeleteFunc(jobs, func(j core.Job) bool {
		dup := seen[j.Delivery.ID]
		seen[j.Delivery.ID] = true
		return dup
	})
	slices.SortFunc(jobs, func(a, b core.Job) int {
		if c := a.Delivery.NextAttemptAt.Compare(b.Delivery.NextAttemptAt); c != 0 {
			return c
		}
		return strings.Compare(a.Delivery.ID, b.Delivery.ID)
	})
	return jobs[:min(len(jobs), limit)]
}
