package main

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/testenv"
)

// Two `hookd serve` processes on one PostgreSQL schema: what happens to a
// node's destinations when it dies or stops.

// held counts the live shard leases of node.
func held(t *testing.T, db, node string) int {
	return testenv.PostgresCount(t, db, `SELECT count(*) FROM shard_leases WHERE node = $1 AND expires_at > now()`, node)
}

func waitSplit(t *testing.T, db string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, "shards split between node-a and node-b", func() bool {
		return held(t, db, "node-a") == core.NumShards/2 && held(t, db, "node-b") == core.NumShards/2
	})
}

// receiverOf starts loopback receivers until one's host lands on a shard
// node leases.
func receiverOf(t *testing.T, db, node string) *testenv.Receiver {
	t.Helper()
	for range 100 {
		rc := testenv.NewReceiver(t)
		shard := core.ShardOf(strings.TrimPrefix(rc.URL, "http://"))
		if testenv.PostgresCount(t, db, `SELECT count(*) FROM shard_leases WHERE shard = $1 AND node = $2`, shard, node) == 1 {
			return rc
		}
		rc.Close()
	}
	t.Fatalf("no receiver port landed on %s's shards", node)
	return nil
}

// kill -9 of the node that owns a destination: once its leases lapse the
// other node takes its shards and delivers everything it left pending.
func TestKill9NodeShardsAreTakenOver(t *testing.T) {
	db := testenv.PostgresSchema(t)
	const ttl = 1500 * time.Millisecond
	a := startProc(t, db, "--node-id", "node-a", "--lease-ttl", ttl.String())
	b := startProc(t, db, "--node-id", "node-b", "--lease-ttl", ttl.String())
	waitSplit(t, db)

	// B's destination answers 503 until B is dead, so every accepted event
	// is pending when it dies; afterwards it records what it takes.
	rc := receiverOf(t, db, "node-b")
	down := downUntilKill(rc)
	clientA := &testenv.Client{T: t, Base: a.base, Token: "crash-admin"}
	clientB := &testenv.Client{T: t, Base: b.base, Token: "crash-admin"}
	clientA.Must(201, "POST", "/v1/subscriptions", map[string]any{"url": rc.URL, "event_types": []string{"*"},
		"retry_schedule": []string{"1s", "1s", "1s", "1s", "1s", "1s", "1s", "1s", "1s", "1s"}})
	// Node B matches events to the subscription only once it has heard of
	// it, a notification away: until then an event it accepts gets no
	// delivery (docs/architecture.md, registry sync). Probe until it has.
	var accepted []string
	testenv.Eventually(t, 10*time.Second, "node B knows the subscription", func() bool {
		id := clientB.Must(202, "POST", "/v1/events", map[string]any{"type": "a.probe", "payload": map[string]any{}})["id"].(string)
		if ds, _ := clientB.Must(200, "GET", "/v1/events/"+id, nil)["deliveries"].([]any); len(ds) > 0 {
			accepted = append(accepted, id)
			return true
		}
		return false
	})
	for i := range 40 {
		c := clientA
		if i%2 == 1 {
			c = clientB
		}
		accepted = append(accepted, c.Must(202, "POST", "/v1/events", map[string]any{"type": "a.b", "payload": map[string]any{"i": i}})["id"].(string))
	}
	// B (the owner) is sending: its breaker opens after 20 failures, so
	// not every event is tried.
	testenv.Eventually(t, 20*time.Second, "node B tries events", func() bool { return rc.Count() >= 20 })

	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	b.cmd.Wait()
	killed := time.Now()
	down.killed.Store(true)
	// B's breaker opens after 20 failures and is published within a
	// second: when that lands before the kill, A takes the open circuit up
	// and probes after its 30 s (±20 %) as B would have, so the bound
	// leaves room for that (a loaded run once took the 30 s this was).
	for deadline := time.Now().Add(60 * time.Second); !down.tookAll(accepted); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			var missing []string
			for _, id := range accepted {
				if !down.tookAll([]string{id}) {
					missing = append(missing, id)
				}
			}
			t.Fatalf("not within 60s: every event delivered by node A; receiver took %d of %d; not taken %v, their attempts:\n%s\nnode A's dispatcher:\n%s\ndeliveries:\n%s\nleases of the shard:\n%s",
				down.count(), len(accepted), missing,
				testenv.PostgresRows(t, db, `SELECT a.delivery_id, a.n, a.started_at, a.duration_ns, a.status_code, a.error
					FROM attempts a JOIN deliveries d ON d.id = a.delivery_id WHERE d.event_id = ANY($1) ORDER BY 1, 2`, missing),
				dispatchMetrics(a.base),
				testenv.PostgresRows(t, db, `SELECT id, state, attempt_count, next_attempt_at - now(), shard FROM deliveries ORDER BY id`),
				testenv.PostgresRows(t, db, `SELECT shard, node, expires_at - now(), leaving FROM shard_leases WHERE shard = $1`,
					core.ShardOf(strings.TrimPrefix(rc.URL, "http://"))))
		}
	}
	took := time.Since(killed)
	if n := held(t, db, "node-a"); n != core.NumShards {
		t.Fatalf("node A holds %d shards after B died, want all %d", n, core.NumShards)
	}
	testenv.Eventually(t, 10*time.Second, "results written", func() bool {
		return testenv.PostgresCount(t, db, `SELECT count(*) FROM deliveries WHERE state <> 'delivered'`) == 0
	})
	t.Logf("B killed with %d events pending; A delivered them all %s later (lease TTL %s)", len(accepted), took.Round(time.Millisecond), ttl)
}

// A graceful stop hands the node's shards over at once, long before its
// leases would have lapsed, and the other node then delivers to them.
func TestSIGTERMHandsShardsOverAtOnce(t *testing.T) {
	db := testenv.PostgresSchema(t)
	const ttl = 30 * time.Second // A renews every 10s: only the release can explain a quick takeover
	a := startProc(t, db, "--node-id", "node-a", "--lease-ttl", ttl.String())
	b := startProc(t, db, "--node-id", "node-b", "--lease-ttl", ttl.String())
	waitSplit(t, db)
	rc := receiverOf(t, db, "node-b")

	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Wait(); err != nil {
		t.Fatalf("node B exited with %v, want a clean exit", err)
	}
	testenv.Eventually(t, 5*time.Second, "node A holds every shard", func() bool {
		return held(t, db, "node-a") == core.NumShards
	})
	if n := testenv.PostgresCount(t, db, `SELECT count(*) FROM nodes WHERE id = 'node-b'`); n != 0 {
		t.Errorf("node B still listed as a node after its graceful stop")
	}

	clientA := &testenv.Client{T: t, Base: a.base, Token: "crash-admin"}
	clientA.Must(201, "POST", "/v1/subscriptions", map[string]any{"url": rc.URL, "event_types": []string{"*"}})
	clientA.Must(202, "POST", "/v1/events", map[string]any{"type": "a.b", "payload": map[string]any{}})
	testenv.Eventually(t, 10*time.Second, "node A delivers to B's former destination", func() bool { return rc.Count() == 1 })
}

// dispatchMetrics is a node's dispatcher and attempt metrics, for a failure
// message.
func dispatchMetrics(base string) string {
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer crash-admin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var b strings.Builder
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "hookd_dispatch_") || strings.HasPrefix(line, "hookd_breakers") ||
			strings.HasPrefix(line, "hookd_attempts_total") || strings.HasPrefix(line, "hookd_hosts") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
