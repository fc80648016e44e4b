-- hookd schema, PostgreSQL flavour: the SQLite schema after its migrations
-- 0001-0003, in native types. Times are timestamptz (microseconds); a NULL
-- time means "unset" (the zero time.Time). Lists are arrays; a NULL array
-- keeps a nil list distinct from an empty one (a nil retry schedule means the
-- default). IDs and cursors compare bytewise (COLLATE "C"), as in SQLite,
-- whatever the database's collation: pages and sequences follow ID order.

CREATE TABLE tenants (
    id         text COLLATE "C" PRIMARY KEY,
    name       text NOT NULL,
    created_at timestamptz NOT NULL
);

CREATE TABLE api_keys (
    id         text COLLATE "C" PRIMARY KEY,
    tenant_id  text COLLATE "C" NOT NULL REFERENCES tenants(id),
    hash       text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL
);
CREATE INDEX api_keys_tenant ON api_keys(tenant_id);

CREATE TABLE subscriptions (
    id                     text COLLATE "C" PRIMARY KEY,
    tenant_id              text COLLATE "C" NOT NULL REFERENCES tenants(id),
    url                    text NOT NULL,
    host                   text NOT NULL,
    event_types            text[],
    secret                 text NOT NULL,
    prev_secret            text NOT NULL DEFAULT '',
    prev_secret_expires_at timestamptz,
    ordered                boolean NOT NULL DEFAULT false,
    retry_schedule         text[], -- Go durations ("5s"); NULL: the default
    timeout_ns             bigint NOT NULL DEFAULT 0,
    max_concurrency        integer NOT NULL DEFAULT 0,
    rate_limit             double precision NOT NULL DEFAULT 0,
    retry_status_codes     integer[],
    state                  text NOT NULL CHECK (state IN ('active', 'paused', 'disabled')),
    disabled_reason        text NOT NULL DEFAULT '',
    created_at             timestamptz NOT NULL,
    updated_at             timestamptz NOT NULL,
    deleted_at             timestamptz -- NULL while live
);
CREATE INDEX subscriptions_tenant ON subscriptions(tenant_id, id) WHERE deleted_at IS NULL;

CREATE TABLE events (
    id              text COLLATE "C" PRIMARY KEY,
    tenant_id       text COLLATE "C" NOT NULL,
    type            text NOT NULL,
    payload         bytea NOT NULL,
    idempotency_key text NOT NULL DEFAULT '',
    ordering_key    text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL
);
-- The arbiter of INSERT ... ON CONFLICT in EventInsertBatch: concurrent
-- writers of one key (on any node) wait on it and only one row lands.
CREATE UNIQUE INDEX events_idempotency ON events(tenant_id, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX events_created ON events(created_at);

CREATE TABLE deliveries (
    id               text COLLATE "C" PRIMARY KEY,
    event_id         text COLLATE "C" NOT NULL REFERENCES events(id) ON DELETE CASCADE,
    subscription_id  text COLLATE "C" NOT NULL REFERENCES subscriptions(id),
    tenant_id        text COLLATE "C" NOT NULL,
    event_type       text NOT NULL,
    host             text NOT NULL,
    shard            integer NOT NULL,
    state            text NOT NULL CHECK (state IN ('pending', 'delivered', 'failed', 'skipped')),
    attempt_count    integer NOT NULL DEFAULT 0,
    round_start      integer NOT NULL DEFAULT 0,
    round_started_at timestamptz NOT NULL,
    next_attempt_at  timestamptz, -- NULL once nothing is scheduled
    last_status      integer NOT NULL DEFAULT 0,
    last_error       text NOT NULL DEFAULT '',
    ordering_key     text NOT NULL DEFAULT '',
    sequence         bigint NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    UNIQUE (event_id, subscription_id)
);
-- Every pending index is partial: sized by pending work, not by history.
-- Per shard: a node polls the shards it leases; with subscription_id second,
-- "which subscriptions have work on these shards, and from when" is one index
-- probe per (shard, subscription) instead of a walk over every pending row.
CREATE INDEX deliveries_shard_due ON deliveries(shard, subscription_id, next_attempt_at) WHERE state = 'pending';
-- Per subscription (a lane): what is due, in order.
CREATE INDEX deliveries_subscription_due ON deliveries(subscription_id, next_attempt_at, id) WHERE state = 'pending';
-- Per ordering key: whether an earlier delivery of the key is still pending.
CREATE INDEX deliveries_key_line ON deliveries(subscription_id, ordering_key, sequence) WHERE state = 'pending' AND sequence > 0;
CREATE INDEX deliveries_subscription_failed ON deliveries(subscription_id, created_at) WHERE state = 'failed';
CREATE INDEX deliveries_subscription ON deliveries(subscription_id, id);

CREATE TABLE attempts (
    delivery_id text COLLATE "C" NOT NULL REFERENCES deliveries(id) ON DELETE CASCADE,
    n           integer NOT NULL,
    started_at  timestamptz NOT NULL,
    duration_ns bigint NOT NULL,
    status_code integer NOT NULL DEFAULT 0,
    error       text NOT NULL DEFAULT '',
    response    text NOT NULL DEFAULT '',
    PRIMARY KEY (delivery_id, n)
);

-- Last Sequence handed out per (ordered subscription, ordering key). Its row
-- lock serialises the writers of one line, so sequences have no gap or repeat.
CREATE TABLE ordering_sequences (
    subscription_id text COLLATE "C" NOT NULL REFERENCES subscriptions(id),
    ordering_key    text COLLATE "C" NOT NULL,
    last_sequence   bigint NOT NULL,
    PRIMARY KEY (subscription_id, ordering_key)
);

-- A bulk replay job (see the SQLite migration 0003).
CREATE TABLE replay_jobs (
    id              text COLLATE "C" PRIMARY KEY,
    tenant_id       text COLLATE "C" NOT NULL,
    subscription_id text COLLATE "C" NOT NULL REFERENCES subscriptions(id),
    since           timestamptz NOT NULL,
    until           timestamptz, -- NULL: no upper bound
    event_types     text[] NOT NULL, -- empty: every type
    state           text NOT NULL CHECK (state IN ('running', 'done')),
    replayed        integer NOT NULL DEFAULT 0,
    cursor          text COLLATE "C" NOT NULL DEFAULT '', -- last delivery ID considered
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);
CREATE INDEX replay_jobs_running ON replay_jobs(created_at) WHERE state = 'running';

INSERT INTO tenants (id, name, created_at) VALUES ('default', 'default', now());
