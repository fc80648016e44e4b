-- hookd schema, SQLite flavour. Times are INTEGER unix nanoseconds (UTC),
-- 0 meaning "unset". JSON lists are TEXT; 'null' keeps a nil list distinct
-- from an empty one (a nil retry schedule means the default).

CREATE TABLE tenants (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants(id),
    hash       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX api_keys_tenant ON api_keys(tenant_id);

CREATE TABLE subscriptions (
    id                     TEXT PRIMARY KEY,
    tenant_id              TEXT NOT NULL REFERENCES tenants(id),
    url                    TEXT NOT NULL,
    host                   TEXT NOT NULL,
    event_types            TEXT NOT NULL,
    secret                 TEXT NOT NULL,
    prev_secret            TEXT NOT NULL DEFAULT '',
    prev_secret_expires_at INTEGER NOT NULL DEFAULT 0,
    ordered                INTEGER NOT NULL DEFAULT 0,
    retry_schedule         TEXT NOT NULL DEFAULT 'null',
    timeout_ns             INTEGER NOT NULL DEFAULT 0,
    max_concurrency        INTEGER NOT NULL DEFAULT 0,
    rate_limit             REAL NOT NULL DEFAULT 0,
    retry_status_codes     TEXT NOT NULL DEFAULT 'null',
    state                  TEXT NOT NULL CHECK (state IN ('active', 'paused', 'disabled')),
    disabled_reason        TEXT NOT NULL DEFAULT '',
    created_at             INTEGER NOT NULL,
    updated_at             INTEGER NOT NULL,
    deleted_at             INTEGER -- NULL while live
) STRICT;
CREATE INDEX subscriptions_tenant ON subscriptions(tenant_id, id) WHERE deleted_at IS NULL;

CREATE TABLE events (
    id              TEXT PRIMARY KEY,
    tenant_id       TEXT NOT NULL,
    type            TEXT NOT NULL,
    payload         BLOB NOT NULL,
    idempotency_key TEXT NOT NULL DEFAULT '',
    ordering_key    TEXT NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX events_idempotency ON events(tenant_id, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX events_created ON events(created_at);

CREATE TABLE deliveries (
    id              TEXT PRIMARY KEY,
    event_id        TEXT NOT NULL REFERENCES events(id) ON DELETE CASCADE,
    subscription_id TEXT NOT NULL REFERENCES subscriptions(id),
    tenant_id       TEXT NOT NULL,
    event_type      TEXT NOT NULL,
    host            TEXT NOT NULL,
    shard           INTEGER NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed', 'skipped')),
    attempt_count   INTEGER NOT NULL DEFAULT 0,
    round_start     INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_status     INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT NOT NULL DEFAULT '',
    sequence        INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    UNIQUE (event_id, subscription_id)
) STRICT;
-- Both pending indexes are sized by pending work, not by history.
CREATE INDEX deliveries_shard_due ON deliveries(shard, next_attempt_at) WHERE state = 'pending';
CREATE INDEX deliveries_host_due ON deliveries(host, next_attempt_at, id) WHERE state = 'pending';
CREATE INDEX deliveries_subscription ON deliveries(subscription_id, id);

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

-- Last Sequence handed out per (ordered subscription, ordering key).
CREATE TABLE ordering_sequences (
    subscription_id TEXT NOT NULL REFERENCES subscriptions(id),
    ordering_key    TEXT NOT NULL,
    last_sequence   INTEGER NOT NULL,
    PRIMARY KEY (subscription_id, ordering_key)
) STRICT, WITHOUT ROWID;

INSERT INTO tenants (id, name, created_at) VALUES ('default', 'default', CAST(strftime('%s', 'now') AS INTEGER) * 1000000000);
