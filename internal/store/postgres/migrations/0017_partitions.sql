-- Events, deliveries and attempts partitioned by the day of their IDs, so
-- retention drops a whole day instead of deleting it row by row (partitions.go
-- makes and drops the days). Not a rolling upgrade: a node of the previous
-- release writes events with an ON CONFLICT on events_idempotency, which is
-- gone. Stop every node, then start the new release (docs/operations.md).
--
-- IDs are ULIDs, their first ten characters the millisecond they were made
-- in, so a day is a range of IDs (core.IDFloor) and a lookup by ID reads one
-- partition. Deliveries are split by their own ID, attempts by their
-- delivery's: a delivery and its attempts always share a day, and an event's
-- deliveries are made with it (in its day, or the next one if a batch spans
-- midnight).
--
-- The tables as they are become one partition each, from the start of time
-- to just past their last ID: nothing is copied. Later rows go to the day
-- partitions; retention deletes the old partition's rows in batches as
-- before until it is empty.
--
-- A partitioned table's unique index must hold its partition key, so an
-- idempotency key can no longer be unique on events: event_keys is its
-- arbiter, one row per keyed event, removed with the event.
CREATE TABLE event_keys (
    tenant_id       text COLLATE "C" NOT NULL,
    idempotency_key text NOT NULL,
    event_id        text COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant_id, idempotency_key)
);
INSERT INTO event_keys (tenant_id, idempotency_key, event_id)
    SELECT tenant_id, idempotency_key, id FROM events WHERE idempotency_key <> '';
DROP INDEX events_idempotency;

-- Foreign keys between partitioned tables would have to be checked on
-- every drop; the code writes a delivery only with its event, and an
-- attempt only for a delivery it read, and removes them together (the
-- PostgreSQL conformance run checks nothing is orphaned after each test).
-- The one to subscriptions stays.
ALTER TABLE attempts DROP CONSTRAINT attempts_delivery_id_fkey;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_event_id_fkey;

ALTER TABLE events RENAME TO events_legacy;
ALTER TABLE events_legacy RENAME CONSTRAINT events_pkey TO events_legacy_pkey;
ALTER INDEX events_created RENAME TO events_legacy_created;
ALTER INDEX events_tenant_time RENAME TO events_legacy_tenant_time;
ALTER INDEX events_tenant_type RENAME TO events_legacy_tenant_type;

ALTER TABLE deliveries RENAME TO deliveries_legacy;
ALTER TABLE deliveries_legacy RENAME CONSTRAINT deliveries_pkey TO deliveries_legacy_pkey;
ALTER TABLE deliveries_legacy RENAME CONSTRAINT deliveries_subscription_id_fkey TO deliveries_legacy_subscription_id_fkey;
ALTER INDEX deliveries_shard_due RENAME TO deliveries_legacy_shard_due;
ALTER INDEX deliveries_subscription_due RENAME TO deliveries_legacy_subscription_due;
ALTER INDEX deliveries_key_line RENAME TO deliveries_legacy_key_line;
ALTER INDEX deliveries_subscription_failed RENAME TO deliveries_legacy_subscription_failed;
-- (subscription_id, id) duplicated (subscription_id, created_at): every walk of
-- a subscription's deliveries is by (created_at, id), as on SQLite, and one
-- index less is an entry less on every insert and every result (a state
-- change is an update that is not HOT, writing every index).
DROP INDEX deliveries_subscription;
ALTER INDEX deliveries_subscription_created RENAME TO deliveries_legacy_subscription_created;

ALTER TABLE attempts RENAME TO attempts_legacy;
ALTER TABLE attempts_legacy RENAME CONSTRAINT attempts_pkey TO attempts_legacy_pkey;

CREATE TABLE events (LIKE events_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (id);
ALTER TABLE events ADD PRIMARY KEY (id);
CREATE INDEX events_created ON events(created_at);
CREATE INDEX events_tenant_time ON events(tenant_id, created_at, id);
CREATE INDEX events_tenant_type ON events(tenant_id, type, created_at, id);

CREATE TABLE deliveries (LIKE deliveries_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (id);
ALTER TABLE deliveries ADD PRIMARY KEY (id);
ALTER TABLE deliveries ADD FOREIGN KEY (subscription_id) REFERENCES subscriptions(id);
CREATE INDEX deliveries_shard_due ON deliveries(shard, subscription_id, next_attempt_at) WHERE state = 'pending';
CREATE INDEX deliveries_subscription_due ON deliveries(subscription_id, next_attempt_at, id) WHERE state = 'pending';
CREATE INDEX deliveries_key_line ON deliveries(subscription_id, ordering_key, sequence) WHERE state = 'pending' AND sequence > 0;
CREATE INDEX deliveries_subscription_failed ON deliveries(subscription_id, created_at) WHERE state = 'failed';
CREATE INDEX deliveries_subscription_created ON deliveries(subscription_id, created_at);
-- An event's deliveries, by (event_id, subscription_id): unique within
-- each partition (the legacy one keeps its constraint; partitions.go makes
-- the index of each day), as no index of the parent can be without id.

CREATE TABLE attempts (LIKE attempts_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (delivery_id);
ALTER TABLE attempts ADD PRIMARY KEY (delivery_id, n);

-- Attaching checks each legacy table's rows against its range (one scan)
-- and takes its indexes as the partition's.
DO $$
DECLARE
    e text;
    d text;
BEGIN
    SELECT coalesce(max(id) || '0', 'evt_0') INTO e FROM events_legacy;
    EXECUTE format('ALTER TABLE events ATTACH PARTITION events_legacy FOR VALUES FROM (MINVALUE) TO (%L)', e);
    -- Attempts end where deliveries do: an attempt's delivery_id is one.
    SELECT coalesce(max(id) || '0', 'dlv_0') INTO d FROM deliveries_legacy;
    EXECUTE format('ALTER TABLE deliveries ATTACH PARTITION deliveries_legacy FOR VALUES FROM (MINVALUE) TO (%L)', d);
    EXECUTE format('ALTER TABLE attempts ATTACH PARTITION attempts_legacy FOR VALUES FROM (MINVALUE) TO (%L)', d);
END $$;
