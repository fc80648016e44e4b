-- Stats count deliveries per hour as well as per day, and a bucket must
-- not change when retention removes its rows: the purge adds what it
-- removes to hourly counts too, per subscription and UTC hour of the
-- delivery's creation, in the transaction that writes the daily ones.
-- Kept forever, like them; no foreign key: the counts outlive the rows.
CREATE TABLE hourly_counts (
    subscription_id TEXT NOT NULL,
    hour            INTEGER NOT NULL, -- hours since 1970-01-01T00:00Z
    delivered       INTEGER NOT NULL DEFAULT 0,
    failed          INTEGER NOT NULL DEFAULT 0,
    skipped         INTEGER NOT NULL DEFAULT 0,
    attempts        INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (subscription_id, hour)
) STRICT, WITHOUT ROWID;
-- Stats read a subscription's deliveries by creation time: without this
-- they walked every delivery the subscription has within retention.
CREATE INDEX deliveries_subscription_created ON deliveries(subscription_id, created_at);
