-- Ingest and result writes are the embedded store's hot path. A delivery is
-- found by its ID, so storing the row in its primary-key B-tree (WITHOUT
-- ROWID) saves a B-tree per insert and per update; and dispatch on SQLite
-- works per subscription (one node holds every shard), so the
-- (shard, next_attempt_at) index only cost writes. Attempts reference
-- deliveries, so they are set aside while the table is rebuilt: dropping a
-- referenced table would cascade into them.
CREATE TABLE deliveries_new (
    id               TEXT PRIMARY KEY,
    event_id         TEXT NOT NULL REFERENCES events(id) ON DELETE CASCADE,
    subscription_id  TEXT NOT NULL REFERENCES subscriptions(id),
    tenant_id        TEXT NOT NULL,
    event_type       TEXT NOT NULL,
    host             TEXT NOT NULL,
    shard            INTEGER NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed', 'skipped')),
    attempt_count    INTEGER NOT NULL DEFAULT 0,
    round_start      INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER NOT NULL,
    last_status      INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT NOT NULL DEFAULT '',
    sequence         INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    ordering_key     TEXT NOT NULL DEFAULT '',
    round_started_at INTEGER NOT NULL DEFAULT 0,
    UNIQUE (event_id, subscription_id)
) STRICT, WITHOUT ROWID;
INSERT INTO deliveries_new (id, event_id, subscription_id, tenant_id, event_type, host, shard, state,
    attempt_count, round_start, next_attempt_at, last_status, last_error, sequence, created_at, updated_at,
    ordering_key, round_started_at)
SELECT id, event_id, subscription_id, tenant_id, event_type, host, shard, state,
    attempt_count, round_start, next_attempt_at, last_status, last_error, sequence, created_at, updated_at,
    ordering_key, round_started_at FROM deliveries;

CREATE TABLE attempts_aside AS SELECT * FROM attempts;
DROP TABLE attempts;
DROP TABLE deliveries;
ALTER TABLE deliveries_new RENAME TO deliveries;

CREATE TABLE attempts (
    delivery_id TEXT NOT NULL REFERENCES deliveries(id) ON DELETE CASCADE,
    n           INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    duration_ns INTEGER NOT NULL,
    status_code INTEGER NOT NULL DEFAULT 0,
    error       TEXT NOT NULL DEFAULT '',
    response    TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (delivery_id, n)
) STRICT, WITHOUT ROWID;
INSERT INTO attempts SELECT delivery_id, n, started_at, duration_ns, status_code, error, response FROM attempts_aside;
DROP TABLE attempts_aside;

CREATE INDEX deliveries_subscription ON deliveries(subscription_id, id);
CREATE INDEX deliveries_subscription_due ON deliveries(subscription_id, next_attempt_at, id) WHERE state = 'pending';
CREATE INDEX deliveries_key_line ON deliveries(subscription_id, ordering_key, sequence) WHERE state = 'pending' AND sequence > 0;
CREATE INDEX deliveries_subscription_failed ON deliveries(subscription_id, created_at) WHERE state = 'failed';
