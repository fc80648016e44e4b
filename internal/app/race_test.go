package app

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/internal/testenv"
)

// A subscription disabled or deleted while events for it keep coming: once
// the posts end, none of its deliveries is pending (left so, no node would
// ever send it, nor retention remove its event). Each was delivered before
// the change or skipped. On PostgreSQL one node changes the subscription
// while the events go to another, whose registry hears of it a
// notification later.
func TestChangeRacingIngestLeavesNothingPending(t *testing.T) {
	t.Parallel()
	const rounds = 3
	for _, change := range []string{"disable", "delete"} {
		// A few rounds: each loses the race (without the store deciding
		// at commit) most of the time, not every time.
		t.Run("sqlite/"+change, func(t *testing.T) {
			t.Parallel()
			e := start(t, true)
			for round := range rounds {
				raceChange(t, e, e, change, round)
			}
		})
		t.Run("postgres/"+change, func(t *testing.T) {
			t.Parallel()
			a, b := twoNodes(t) // skipped without HOOKD_TEST_POSTGRES_URL
			for round := range rounds {
				raceChange(t, a, b, change, round)
			}
		})
	}
}

// raceChange posts events for a new subscription to poster from several
// goroutines, has changer disable or delete it mid-stream, and checks
// what the store holds once the posts end.
func raceChange(t *testing.T, changer, poster *env, change string, round int) {
	const (
		posters = 4
		maxPost = 2000 // per poster: the loops end whatever happens
		before  = 40   // accepted before the change
		after   = 40   // accepted after it
	)
	rc := testenv.NewReceiver(t)
	typ := fmt.Sprintf("race.r%d", round)
	sub, _ := changer.subscribe(changer.admin, rc.URL, []string{typ + ".*"}, nil)
	waitKnown(t, sub, present, changer, poster)

	var accepted atomic.Int64
	stop := make(chan struct{})
	halt := sync.OnceFunc(func() { close(stop) })
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 30 * time.Second}
	for p := range posters {
		wg.Go(func() {
			for i := range maxPost {
				select {
				case <-stop:
					return
				default:
				}
				body := fmt.Sprintf(`{"type":"%s.tick","payload":{"poster":%d,"n":%d}}`, typ, p, i)
				req, _ := http.NewRequest("POST", poster.base+"/v1/events", bytes.NewBufferString(body))
				req.Header.Set("Authorization", "Bearer "+adminToken)
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("poster %d: %v", p, err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					t.Errorf("poster %d: status %d", p, resp.StatusCode)
					return
				}
				accepted.Add(1)
			}
		})
	}
	defer func() { halt(); wg.Wait() }() // on a failure below

	testenv.Eventually(t, 20*time.Second, "events accepted and one delivered before the change", func() bool {
		return accepted.Load() >= before && countIn(t, changer, sub, core.DeliveryDelivered) > 0
	})
	began := time.Now()
	switch change {
	case "disable":
		changer.admin.Must(http.StatusOK, "PATCH", "/v1/subscriptions/"+sub, map[string]any{"state": "disabled"})
	case "delete":
		changer.admin.Must(http.StatusNoContent, "DELETE", "/v1/subscriptions/"+sub, nil)
	}
	took := time.Since(began)
	at := accepted.Load()
	testenv.Eventually(t, 20*time.Second, "events accepted after the change", func() bool {
		return accepted.Load() >= at+after
	})
	halt()
	wg.Wait()

	// Every post has its answer, so everything it wrote is committed.
	if n := countIn(t, changer, sub, core.DeliveryPending); n != 0 {
		t.Fatalf("%d deliveries of the %sd subscription left pending (of %d events accepted, %d before the change)",
			n, change, accepted.Load(), at)
	}
	delivered, skipped := countIn(t, changer, sub, core.DeliveryDelivered), countIn(t, changer, sub, core.DeliverySkipped)
	if all := countIn(t, changer, sub, ""); all != delivered+skipped {
		t.Fatalf("%d deliveries: %d delivered, %d skipped, the rest neither", all, delivered, skipped)
	}
	t.Logf("round %d: %s took %v beside ingest; %d events accepted (%d before it): %d delivered, %d skipped",
		round, change, took, accepted.Load(), at, delivered, skipped)
}

// countIn reads from the store how many of a subscription's deliveries are
// in state ("" any).
func countIn(t *testing.T, e *env, subID string, state core.DeliveryState) int {
	n := 0
	p := store.DeliveryListParams{SubscriptionID: subID, State: state, Limit: 100}
	for {
		page, err := e.app.store.DeliveryList(t.Context(), p)
		if err != nil {
			t.Errorf("DeliveryList: %v", err)
			return -1
		}
		n += len(page.Data)
		if page.NextCursor == "" {
			return n
		}
		p.Cursor = page.NextCursor
	}
}
