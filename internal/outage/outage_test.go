package outage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"hookd/internal/store"
)

// fakeStore fails its checks with err while err is set, and its writes
// only with writeErr while that is set (a full disk: reads still work).
// Its HealthOutage maps errRaw, as a driver's error no method mapped.
type fakeStore struct {
	mu            sync.Mutex
	err, writeErr error
	pings, writes int
}

func (f *fakeStore) set(err error)      { f.mu.Lock(); f.err = err; f.mu.Unlock() }
func (f *fakeStore) setWrite(err error) { f.mu.Lock(); f.writeErr = err; f.mu.Unlock() }

var errRaw = errors.New("error preprocessing batch (prepare): unexpected EOF")

func (f *fakeStore) HealthOutage(err error) error {
	if errors.Is(err, errRaw) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

// counts returns how many pings and probe writes it answered.
func (f *fakeStore) counts() (pings, writes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pings, f.writes
}

func (f *fakeStore) HealthPing(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pings++
	return f.err
}

func (f *fakeStore) HealthWrite(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes++
	if f.writeErr != nil {
		return f.writeErr
	}
	return f.err
}

type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// lines returns the log lines whose msg is msg.
func (l *logBuffer) lines(msg string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(line, "msg=\""+msg+"\"") {
			out = append(out, line)
		}
	}
	return out
}

// started runs a tracker with default timings over a healthy fake store,
// logging to a buffer, until the test ends.
func started(t *testing.T) (*Tracker, *fakeStore, *logBuffer) {
	logs, st := &logBuffer{}, &fakeStore{}
	tr := New(Config{Log: slog.New(slog.NewTextHandler(logs, nil))}, st)
	tr.Start()
	t.Cleanup(tr.Stop)
	return tr, st, logs
}

var errDown = fmt.Errorf("%w: dial tcp 127.0.0.1:5432: connection refused", store.ErrUnavailable)

// TestOutageLoggedOnceThenEveryRepeatThenEnded: a 65 s outage with a
// failed call every half second logs one line when it begins, one every
// 30 s while it lasts (with the count since the last), and one when a
// probe write commits, with its length; readiness follows it.
func TestOutageLoggedOnceThenEveryRepeatThenEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, st, logs := started(t)

		time.Sleep(12 * time.Second) // two pings, both fine
		if pings, writes := st.counts(); tr.Err() != nil || pings != 2 || writes != 0 {
			t.Fatalf("healthy: Err %v, %d pings, %d writes; want nil, 2, 0", tr.Err(), pings, writes)
		}
		start := time.Now()
		st.set(errDown)
		for range 130 { // 65 s of failed calls
			tr.Fail(time.Now(), errDown)
			time.Sleep(500 * time.Millisecond)
		}
		if err := tr.Err(); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "store unavailable for 1m5s") ||
			strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("during the outage Err = %v, want store unavailable for 1m5s, without the driver's error", err)
		}
		st.set(nil)
		time.Sleep(time.Second) // the next probe write commits
		synctest.Wait()
		if err := tr.Err(); err != nil {
			t.Fatalf("after a probe committed: Err %v", err)
		}
		if n := len(logs.lines("store outage began")); n != 1 {
			t.Errorf("%d 'began' lines, want 1", n)
		}
		cont := logs.lines("store outage continues")
		if len(cont) != 2 || !strings.Contains(cont[0], "failed_calls=") || !strings.Contains(cont[0], "for=30s") {
			t.Errorf("'continues' lines %q, want 2 (at 30 s and 60 s) with counts", cont)
		}
		// Ended by the probe at 65 s or 66 s (the probe and the last call
		// wake at the same instant, in either order).
		ended := logs.lines("store outage ended")
		if len(ended) != 1 || !strings.Contains(ended[0], "level=INFO") ||
			!(strings.Contains(ended[0], "lasted=1m5s") || strings.Contains(ended[0], "lasted=1m6s")) {
			t.Errorf("'ended' lines %q, want one INFO with lasted=1m5s or 1m6s (from %s)", ended, start)
		}
		if n := strings.Count(logs.String(), "level=ERROR"); n != 3 {
			t.Errorf("%d ERROR lines for one outage of 130 failed calls, want 3", n)
		}
	})
}

// TestIdleNodeNoticesAndRecovers: with no calls at all, the ping notices
// an unreachable store and the probe notices its return.
func TestIdleNodeNoticesAndRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, st, logs := started(t)
		full := fmt.Errorf("%w: database or disk is full", store.ErrFull)
		st.set(full)
		time.Sleep(DefaultPing)
		synctest.Wait()
		if err := tr.Err(); !errors.Is(err, store.ErrFull) || !strings.Contains(err.Error(), "store full") {
			t.Fatalf("after a failed ping: Err %v, want store full", err)
		}
		time.Sleep(10 * time.Second)
		if _, writes := st.counts(); writes < 9 {
			t.Errorf("%d probe writes in 10 s of outage, want one a second", writes)
		}
		st.set(nil)
		time.Sleep(DefaultProbe)
		synctest.Wait()
		if err := tr.Err(); err != nil {
			t.Fatalf("after the store came back: Err %v", err)
		}
		if b, e := logs.lines("store outage began"), logs.lines("store outage ended"); len(b) != 1 || len(e) != 1 || !strings.Contains(b[0], "kind=full") {
			t.Errorf("began %q, ended %q: want one each, kind=full", b, e)
		}
	})
}

// TestFirstProbeOnAnUncutConnectionEndsNothing: the first failure wakes
// the prober at once, and its write may go over a connection the outage
// has not cut yet. That does not end the outage: calls keep failing for
// three seconds, and one outage is logged, which ends once a probe commits
// with no call failed for a probe interval.
func TestFirstProbeOnAnUncutConnectionEndsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logBuffer
		st := &fakeStore{} // its probe writes commit throughout
		tr := New(Config{Log: slog.New(slog.NewTextHandler(&logs, nil))}, st)
		tr.Start()
		defer tr.Stop()
		for range 30 { // the callers' connections are cut
			tr.Fail(time.Now(), errDown)
			time.Sleep(100 * time.Millisecond)
		}
		synctest.Wait()
		if _, writes := st.counts(); writes < 3 || tr.Err() == nil {
			t.Fatalf("%d probe writes committed while calls failed; Err %v, want the outage to last", writes, tr.Err())
		}
		time.Sleep(DefaultProbe)
		synctest.Wait()
		if err := tr.Err(); err != nil {
			t.Fatalf("a probe interval after the last failure: Err %v", err)
		}
		if b, e := logs.lines("store outage began"), logs.lines("store outage ended"); len(b) != 1 || len(e) != 1 {
			t.Errorf("began %q, ended %q: want one of each", b, e)
		}
	})
}

// TestCallBegunBeforeTheEndBeginsNoOutage: a call that hung through an
// outage and fails just after a probe ended it (a lease renewal on a cut
// connection) is that outage's straggler: no new outage, /readyz stays
// ready. A call begun after the end that fails does begin one.
func TestCallBegunBeforeTheEndBeginsNoOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, st, logs := started(t)
		st.set(errDown)
		tr.Fail(time.Now(), errDown)
		renewal := time.Now() // begins during the outage, hangs
		time.Sleep(3 * time.Second)
		st.set(nil)
		time.Sleep(DefaultProbe) // a probe commits: the outage ends
		synctest.Wait()
		if err := tr.Err(); err != nil {
			t.Fatalf("after a probe committed: Err %v", err)
		}
		time.Sleep(10 * time.Millisecond)
		tr.Fail(renewal, errDown) // the hung renewal fails now
		if err := tr.Err(); err != nil {
			t.Errorf("a call begun before the end failed after it: Err %v, want nil", err)
		}
		if b := logs.lines("store outage began"); len(b) != 1 {
			t.Errorf("began %q: want the one outage", b)
		}
		tr.Fail(time.Now(), errDown) // a call begun after the end
		if err := tr.Err(); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("a call begun after the end failed: Err %v, want store unavailable", err)
		}
		if b := logs.lines("store outage began"); len(b) != 2 {
			t.Errorf("began %q: want a second outage", b)
		}
	})
}

// TestIdleNodeWritesToNoticeAFullDisk: a store that still reads but no
// longer writes (a full disk) is noticed by a probe write once no write
// was seen committing for Write; while writes are seen committing the
// prober only pings.
func TestIdleNodeWritesToNoticeAFullDisk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, st, logs := started(t)
		for range 12 { // a minute of writes seen committing
			tr.Committed()
			time.Sleep(5 * time.Second)
		}
		if _, writes := st.counts(); writes != 0 {
			t.Errorf("%d probe writes while writes were seen committing, want 0", writes)
		}
		full := fmt.Errorf("%w: database or disk is full", store.ErrFull)
		st.setWrite(full)
		time.Sleep(DefaultWrite + DefaultPing) // the first ping past Write writes
		synctest.Wait()
		if err := tr.Err(); !errors.Is(err, store.ErrFull) {
			t.Fatalf("idle past Write on a full store: Err %v, want store full", err)
		}
		st.setWrite(nil)
		time.Sleep(DefaultProbe)
		synctest.Wait()
		if err := tr.Err(); err != nil {
			t.Fatalf("after the disk had room: Err %v", err)
		}
		pings, writes := st.counts()
		time.Sleep(DefaultWrite - time.Second) // the probe's write counts as one seen
		if p, w := st.counts(); w != writes || p <= pings {
			t.Errorf("within Write of the probe's write: %d more writes and %d more pings, want 0 and some", w-writes, p-pings)
		}
		if b, e := logs.lines("store outage began"), logs.lines("store outage ended"); len(b) != 1 || len(e) != 1 || !strings.Contains(b[0], "kind=full") {
			t.Errorf("began %q, ended %q: want one each, kind=full", b, e)
		}
	})
}

// TestReportCountsOutagesAndLogsTheRest: a background task's outage,
// mapped or only recognised by the store, is the tracker's to log (once);
// any other failure is logged as the task's own.
func TestReportCountsOutagesAndLogsTheRest(t *testing.T) {
	var logs logBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	st := &fakeStore{}
	tr := New(Config{Log: log}, st) // not started: no prober
	for range 50 {
		if !tr.Report(log, "refilling a lane", time.Now(), fmt.Errorf("reading due work: %w", errRaw), "subscription", "sub_1") {
			t.Fatal("a raw driver error the store calls an outage: Report says it is none")
		}
		if !tr.Report(log, "renewing shard leases", time.Now(), errDown) {
			t.Fatal("ErrUnavailable: Report says it is no outage")
		}
	}
	own := errors.New("constraint violated")
	if tr.Report(log, "moving deliveries", time.Now(), own, "subscription", "sub_2") {
		t.Error("an error of the call's own: Report says it is an outage")
	}
	if !errors.Is(tr.Err(), store.ErrUnavailable) {
		t.Errorf("after reported outages Err = %v, want store unavailable", tr.Err())
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 2 {
		t.Errorf("%d ERROR lines, want 2 (the outage's start, the other error):\n%s", n, logs.String())
	}
	if l := logs.lines("moving deliveries"); len(l) != 1 || !strings.Contains(l[0], "subscription=sub_2") || !strings.Contains(l[0], "constraint violated") {
		t.Errorf("the other error logged as %q, want its message, args and err", l)
	}

	var nilTr *Tracker
	nilTr.Report(log, "renewing shard leases", time.Now(), errDown)
	if l := logs.lines("renewing shard leases"); len(l) != 1 {
		t.Errorf("without a tracker an outage is logged as the task's: %q", l)
	}
}

func TestNilTrackerDoesNothing(t *testing.T) {
	var tr *Tracker
	tr.Fail(time.Now(), errDown)
	tr.Committed()
	tr.Stop()
	if err := tr.Err(); err != nil {
		t.Fatal(err)
	}
}
