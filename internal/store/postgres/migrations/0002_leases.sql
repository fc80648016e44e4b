-- Several nodes share one database: each dispatches only the shards it holds
-- a lease on. A node's heartbeat says how many nodes are alive, which sets
-- every node's fair share. Shard rows are created by Open (one per
-- core.NumShards); a NULL node is a free shard.
CREATE TABLE nodes (
    id          text COLLATE "C" PRIMARY KEY,
    alive_until timestamptz NOT NULL
);

CREATE TABLE shard_leases (
    shard      integer PRIMARY KEY,
    node       text COLLATE "C",
    expires_at timestamptz
);
CREATE INDEX shard_leases_node ON shard_leases(node);
