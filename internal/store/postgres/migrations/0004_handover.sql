-- A node giving shards back on rebalancing keeps them, marked leaving,
-- until its attempts in flight on them are done and recorded; then it
-- hands them over (node NULL). Meanwhile no other node may take them, so
-- nothing in flight is sent twice.
ALTER TABLE shard_leases ADD COLUMN leaving boolean NOT NULL DEFAULT false;
