package dispatch

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/send"
	"hookd/internal/store"
	"hookd/internal/testenv"
)

// slowDue answers its first DeliveryDue as the store stood when asked, but
// only once the test lets it: a refill whose query is slow.
type slowDue struct {
	store.Store
	once    atomic.Bool
	asked   chan struct{}
	release chan struct{}
}

func (s *slowDue) DeliveryDue(ctx context.Context, p store.DeliveryDueParams) ([]core.Job, time.Time, error) {
	jobs, next, err := s.Store.DeliveryDue(ctx, p)
	if s.once.CompareAndSwap(false, true) {
		close(s.asked)
		<-s.release
	}
	return jobs, next, err
}

func (d *Dispatcher) refilling(host string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h := d.hosts[host]; h != nil {
		for _, l := range h.lanes {
			if l.refilling {
				return true
			}
		}
	}
	return false
}

// A refill's answer can predate results written while it ran: a delivery
// handed off, sent and recorded meanwhile comes back as pending. It must
// not be sent again.
func TestRefillDoesNotResendWhatWasRecordedMeanwhile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	host := "a.example:443"
	sub := b.subscription(t, host)
	id := b.pending(t, sub, 1)[0]
	st := &slowDue{Store: b.store, asked: make(chan struct{}), release: make(chan struct{})}
	var sent atomic.Int64
	d := New(Config{Store: st, Subs: b.subs, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Sender: senderFunc(func(ctx context.Context, s *core.Subscription, j *core.Job) send.Outcome {
			sent.Add(1)
			return send.Outcome{Class: send.Delivered, StatusCode: 200}
		})})
	if err := d.Start(context.Background()); err != nil { // its resync starts a refill
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background()) })
	<-st.asked // the refill has read the delivery as pending

	// Meanwhile it is handed off (as ingest does), sent and recorded.
	dl, _, err := b.store.DeliveryGet(context.Background(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	d.Notify([]core.Job{{Delivery: dl, Event: core.Event{ID: dl.EventID, TenantID: dl.TenantID, Type: dl.EventType, Payload: []byte(`{}`)}}})
	testenv.Eventually(t, 5*time.Second, "the hand-off recorded", func() bool {
		_, known := d.held(host)
		return b.state(t, id).State == core.DeliveryDelivered && known == 0
	})
	close(st.release)
	testenv.Eventually(t, 5*time.Second, "the refill done and nothing in flight", func() bool {
		_, known := d.held(host)
		return !d.refilling(host) && d.Stats().Inflight == 0 && known == 0
	})
	if n := sent.Load(); n != 1 {
		t.Fatalf("sent %d times, want once", n)
	}
}
