package postgres

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"hookd/internal/core"
	"hookd/internal/testenv"
)

const leaseTTL = 10 * time.Second

// cluster is a few nodes sharing one schema, each with its own Store, and
// the shard sets their last ShardLeases calls returned.
type cluster struct {
	t     *testing.T
	nodes map[string]*Store
	last  map[string][]int // node -> its last answer; absent once gone
	mu    sync.Mutex
}

func newCluster(t *testing.T, names ...string) *cluster {
	u := testenv.PostgresSchema(t)
	c := &cluster{t: t, nodes: map[string]*Store{}, last: map[string][]int{}}
	for _, n := range names {
		c.nodes[n] = openURL(t, u)
		c.nodes[n].callerClock = true // the tests step time
	}
	return c
}

// lease renews node's leases, and hands over at once what it gave back, as
// a node with nothing in flight does.
func (c *cluster) lease(node string, now time.Time) []int {
	c.t.Helper()
	got := c.renew(node, now)
	c.handOverLeft(node)
	return got
}

func (c *cluster) renew(node string, now time.Time) []int {
	c.t.Helper()
	got, _, err := c.nodes[node].ShardLeases(c.t.Context(), node, leaseTTL, now)
	if err != nil {
		c.t.Fatalf("ShardLeases(%s): %v", node, err)
	}
	if !slices.IsSorted(got) {
		c.t.Fatalf("ShardLeases(%s) not ascending: %v", node, got)
	}
	c.mu.Lock()
	c.last[node] = got
	c.mu.Unlock()
	return got
}

// handOverLeft hands over every shard node is leaving.
func (c *cluster) handOverLeft(node string) {
	c.t.Helper()
	left := c.leaving(node)
	if err := c.nodes[node].ShardHandOver(c.t.Context(), node, left); err != nil {
		c.t.Fatalf("ShardHandOver(%s): %v", node, err)
	}
}

// leaving lists the shards the table says node is leaving.
func (c *cluster) leaving(node string) []int {
	c.t.Helper()
	rows, _ := c.nodes[node].pool.Query(c.t.Context(), `SELECT shard FROM shard_leases
		WHERE node = $1 AND leaving ORDER BY shard`, node)
	left, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		c.t.Fatal(err)
	}
	return left
}

// round has each named node renew in turn at now, checking after every call.
func (c *cluster) round(now time.Time, names ...string) {
	c.t.Helper()
	for _, n := range names {
		c.lease(n, now)
		c.check(now)
	}
}

// check asserts that no shard is in two nodes' last answers, and that the
// table holds exactly those answers for the nodes whose leases are live.
func (c *cluster) check(now time.Time) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	owner := map[int]string{}
	for n, shards := range c.last {
		for _, sh := range shards {
			if o, ok := owner[sh]; ok {
				c.t.Fatalf("shard %d returned to both %s and %s", sh, o, n)
			}
			owner[sh] = n
		}
	}
	var any *Store
	for _, s := range c.nodes {
		any = s
		break
	}
	rows, err := any.pool.Query(c.t.Context(), `SELECT shard, node FROM shard_leases
		WHERE node IS NOT NULL AND NOT leaving AND expires_at > $1`, now)
	if err != nil {
		c.t.Fatal(err)
	}
	table := map[string][]int{}
	for rows.Next() {
		var sh int
		var n string
		if err := rows.Scan(&sh, &n); err != nil {
			c.t.Fatal(err)
		}
		table[n] = append(table[n], sh)
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	for n, shards := range table {
		slices.Sort(shards)
		if !slices.Equal(shards, c.last[n]) {
			c.t.Fatalf("table says %s holds %v, it was told %v", n, shards, c.last[n])
		}
	}
}

// counts returns how many shards each named node holds and whether every
// shard is held by one of them.
func (c *cluster) counts(names ...string) ([]int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	total := 0
	for _, n := range names {
		out = append(out, len(c.last[n]))
		total += len(c.last[n])
	}
	return out, total == core.NumShards
}

func balanced(counts []int, all bool) bool {
	return all && slices.Max(counts)-slices.Min(counts) <= 1
}

// settle runs rounds until the named nodes hold every shard within one of
// each other, failing after a few rounds. It returns the time it got to.
func (c *cluster) settle(now time.Time, names ...string) time.Time {
	c.t.Helper()
	for range 4 {
		now = now.Add(time.Second)
		c.round(now, names...)
		if cs, all := c.counts(names...); balanced(cs, all) {
			return now
		}
	}
	cs, all := c.counts(names...)
	c.t.Fatalf("not balanced after 4 rounds: %v of %v (all held: %v)", cs, names, all)
	return now
}

func TestShardLeasesBalanceAndTakeover(t *testing.T) {
	c := newCluster(t, "node-a", "node-b", "node-c")
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

	// Alone, a node takes everything.
	if got := c.lease("node-a", now); len(got) != core.NumShards {
		t.Fatalf("a lone node holds %d shards", len(got))
	}
	now = c.settle(now, "node-a", "node-b")
	if cs, _ := c.counts("node-a", "node-b"); cs[0] != core.NumShards/2 || cs[1] != core.NumShards/2 {
		t.Fatalf("two nodes: %v", cs)
	}
	now = c.settle(now, "node-a", "node-b", "node-c")
	// Settled: another round moves nothing.
	before := map[string][]int{}
	for n, s := range c.last {
		before[n] = s
	}
	now = now.Add(time.Second)
	c.round(now, "node-c", "node-b", "node-a")
	for n, s := range c.last {
		if !slices.Equal(s, before[n]) {
			t.Fatalf("a settled cluster moved shards of %s: %v -> %v", n, before[n], s)
		}
	}

	// node-c stops renewing. While its lease runs, its shards stay its own.
	cShards := c.last["node-c"]
	lapse := now.Add(leaseTTL)
	c.round(lapse.Add(-time.Second), "node-a", "node-b")
	if cs, all := c.counts("node-a", "node-b"); cs[0]+cs[1] != core.NumShards-len(cShards) || all {
		t.Fatalf("shards of a live node were taken: a+b hold %v", cs)
	}
	// Once it has lapsed, the others share its shards out.
	delete(c.last, "node-c") // its answer is no longer valid
	now = c.settle(lapse, "node-a", "node-b")

	// It comes back and gets its share; then it shuts down gracefully and
	// the others take its shards at once, with no time passing.
	now = c.settle(now, "node-a", "node-b", "node-c")
	if err := c.nodes["node-c"].ShardRelease(t.Context(), "node-c"); err != nil {
		t.Fatal(err)
	}
	delete(c.last, "node-c")
	c.round(now, "node-a", "node-b")
	if cs, all := c.counts("node-a", "node-b"); !balanced(cs, all) {
		t.Fatalf("after a release: %v, all held %v", cs, all)
	}
}

// Nodes renewing at the same moment, many times: never an error, never a
// shard in two answers, and they still settle.
func TestShardLeasesConcurrent(t *testing.T) {
	names := []string{"n1", "n2", "n3"}
	c := newCluster(t, names...)
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for r := range 8 {
		now = now.Add(time.Second)
		var wg sync.WaitGroup
		errs := make(chan error, len(names))
		for _, n := range names {
			wg.Go(func() {
				// Twice, so calls also race the others' second ones.
				for range 2 {
					got, _, err := c.nodes[n].ShardLeases(t.Context(), n, leaseTTL, now)
					if err != nil {
						errs <- fmt.Errorf("round %d %s: %w", r, n, err)
						return
					}
					if err := c.nodes[n].ShardHandOver(t.Context(), n, allShards()); err != nil {
						errs <- fmt.Errorf("round %d %s: hand-over: %w", r, n, err)
						return
					}
					c.mu.Lock()
					c.last[n] = got
					c.mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		c.check(now)
	}
	if cs, all := c.counts(names...); !balanced(cs, all) {
		t.Fatalf("after concurrent rounds: %v, all held %v", cs, all)
	}
}

// Leases are timed by the database's clock, not the nodes': a node whose
// clock runs an hour fast must not see the others' live leases as lapsed
// and take their shards.
func TestLeasesIgnoreANodesSkewedClock(t *testing.T) {
	u := testenv.PostgresSchema(t)
	a, b := openURL(t, u), openURL(t, u)
	ctx := t.Context()
	held := func(s *Store, node string, now time.Time) []int {
		t.Helper()
		got, _, err := s.ShardLeases(ctx, node, leaseTTL, now)
		if err != nil {
			t.Fatalf("ShardLeases(%s): %v", node, err)
		}
		return got
	}
	if got := held(a, "node-a", time.Now()); len(got) != core.NumShards {
		t.Fatalf("the first node holds %d shards, want all %d", len(got), core.NumShards)
	}
	fast := time.Now().Add(time.Hour)
	if got := held(b, "node-b", fast); len(got) != 0 {
		t.Fatalf("a node with a fast clock took %d of a live node's shards", len(got))
	}
	gave := held(a, "node-a", time.Now()) // gives back above its share
	if err := a.ShardHandOver(ctx, "node-a", allShards()); err != nil {
		t.Fatal(err)
	}
	got := held(b, "node-b", fast)
	if len(gave)+len(got) != core.NumShards || len(got) != core.NumShards/2 {
		t.Fatalf("after the give-back: a holds %d, b %d; want %d each", len(gave), len(got), core.NumShards/2)
	}
	for _, s := range got {
		if slices.Contains(gave, s) {
			t.Fatalf("shard %d held by both nodes", s)
		}
	}
}

func allShards() []int {
	all := make([]int, core.NumShards)
	for i := range all {
		all[i] = i
	}
	return all
}

// Shards given back stay the giver's, out of its answer, until it hands
// them over: a joining node cannot take them while the giver may still
// have attempts in flight on them. Handed over, they go at once; and a
// giver whose share grows again takes back its own first.
func TestGivenBackShardsWaitForTheHandOver(t *testing.T) {
	c := newCluster(t, "node-a", "node-b")
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	c.renew("node-a", now)
	if got := c.renew("node-b", now); len(got) != 0 {
		t.Fatalf("node-b took %d shards of a live node", len(got))
	}
	half := core.NumShards / 2
	if got := c.renew("node-a", now); len(got) != half {
		t.Fatalf("node-a answers %d shards after giving back, want %d", len(got), half)
	}
	if left := c.leaving("node-a"); len(left) != half {
		t.Fatalf("node-a is leaving %d shards, want %d", len(left), half)
	}
	if got := c.renew("node-b", now); len(got) != 0 {
		t.Fatalf("node-b took %d shards node-a had not handed over", len(got))
	}
	c.check(now)
	// Handing over one shard frees that one only.
	left := c.leaving("node-a")
	if err := c.nodes["node-a"].ShardHandOver(t.Context(), "node-a", left[:1]); err != nil {
		t.Fatal(err)
	}
	if got := c.renew("node-b", now); !slices.Equal(got, left[:1]) {
		t.Fatalf("node-b holds %v after one hand-over, want %v", got, left[:1])
	}
	// node-b goes silent; once it lapses node-a's share is all again, and
	// it takes back what it was leaving before anything else.
	later := now.Add(2 * leaseTTL)
	delete(c.last, "node-b")
	got := c.renew("node-a", later)
	if len(got) != core.NumShards || len(c.leaving("node-a")) != 0 {
		t.Fatalf("node-a holds %d and leaves %d after node-b lapsed, want all and none",
			len(got), len(c.leaving("node-a")))
	}
	c.check(later)
}
