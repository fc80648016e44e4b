-- Stats count deliveries per hour as well as per day (see the SQLite
-- migration 0009): hourly counts, written by the purge beside the daily
-- ones, kept forever. Only adds: a node of the previous release purges
-- into daily_counts alone (docs/operations.md).
CREATE TABLE hourly_counts (
    subscription_id text COLLATE "C" NOT NULL,
    hour            timestamptz NOT NULL, -- the UTC hour's start
    delivered       bigint NOT NULL DEFAULT 0,
    failed          bigint NOT NULL DEFAULT 0,
    skipped         bigint NOT NULL DEFAULT 0,
    attempts        bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (subscription_id, hour)
);
-- Stats read a subscription's deliveries by creation time. IF NOT EXISTS:
-- on a large table an operator builds it first, CONCURRENTLY, so this
-- step does not hold up ingest while it builds (docs/operations.md).
CREATE INDEX IF NOT EXISTS deliveries_subscription_created ON deliveries(subscription_id, created_at);
