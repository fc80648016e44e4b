package sqlite

import (
	"context"
	"sync"
	"time"

	"hookd/internal/store"
)

// rideWait is how long a result batch waits for an ingest batch's
// transaction to carry it, while such transactions keep coming (ingest
// under load).
// Riding saves a commit of its own: the WAL frames of the index pages both
// touch, an fsync, and the writer's time, which is what bounds ingest at
// fanout 1. With no other write lately, a batch commits at once. (A
// variable for tests.)
var rideWait = 10 * time.Millisecond

// rideTimeout bounds the riders' part of a transaction, which runs on a
// context of its own rather than the carrier's.
const rideTimeout = 30 * time.Second

// riders holds the result batches waiting to ride.
type riders struct {
	mu        sync.Mutex
	queue     []*ride
	lastWrite time.Time // the last commit of an ingest batch
}

type ride struct {
	rs   []store.AttemptResult
	done chan error
}

// wait queues rs and returns once it is committed: carried by another
// write transaction or, failing one soon, by its own.
func (q *riders) wait(ctx context.Context, s *Store, rs []store.AttemptResult) error {
	r := &ride{rs: rs, done: make(chan error, 1)}
	q.mu.Lock()
	q.queue = append(q.queue, r)
	busy := time.Since(q.lastWrite) < rideWait
	q.mu.Unlock()
	if busy {
		t := time.NewTimer(rideWait)
		select {
		case err := <-r.done:
			t.Stop()
			return err
		case <-t.C:
		}
	}
	// Commit whatever waits; if a carrier took r meanwhile, it reports.
	s.batch(ctx, nil)
	return <-r.done
}

// take empties the queue for a transaction to carry.
func (q *riders) take() []*ride {
	q.mu.Lock()
	defer q.mu.Unlock()
	rs := q.queue
	q.queue = nil
	return rs
}

// wrote notes a committed ingest batch, so batches wait for the next one.
func (q *riders) wrote() {
	q.mu.Lock()
	q.lastWrite = time.Now()
	q.mu.Unlock()
}

func done(rs []*ride, err error) {
	for _, r := range rs {
		r.done <- err
	}
}
