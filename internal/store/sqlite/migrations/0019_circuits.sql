-- The node's circuit breakers and Retry-After pauses, as it publishes them
-- (store.CircuitBoard): a host's keyed by "host:port", an endpoint's by its
-- subscription ID. In memory alone, a restart forgot them, and the node
-- sent every endpoint whose circuit was open 20 attempts again, and one
-- told to wait its whole queue at once. Times are unix ns (0: none).
CREATE TABLE host_circuits (
    host         TEXT PRIMARY KEY,
    open         INTEGER NOT NULL,
    retry_at     INTEGER NOT NULL DEFAULT 0,
    paused_until INTEGER NOT NULL DEFAULT 0,
    updated_at   INTEGER NOT NULL
) WITHOUT ROWID;
