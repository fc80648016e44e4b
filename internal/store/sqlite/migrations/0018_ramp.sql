-- A recovering endpoint's ramp, kept with its subscription: admission state
-- is in memory on the node that owns the host's shard, and a node taking the
-- shard over (or one restarted) sent a recovering endpoint's backlog at
-- 1,000-3,800 a second where the ramp had it at 1-3. ramp_at: when its
-- circuit last closed (unix ns, 0: never); ramp_base: the deliveries a second
-- the ramp is a share of.
ALTER TABLE subscriptions ADD COLUMN ramp_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE subscriptions ADD COLUMN ramp_base REAL NOT NULL DEFAULT 0;
