-- Retention removes events, deliveries and attempts past the retention
-- window. What they added up to is kept: per subscription and UTC day (of
-- the delivery's creation), how many were delivered, failed or skipped and
-- how many attempts they took. No foreign key: the counts outlive the rows.
CREATE TABLE daily_counts (
    subscription_id TEXT NOT NULL,
    day             INTEGER NOT NULL, -- days since 1970-01-01, UTC
    delivered       INTEGER NOT NULL DEFAULT 0,
    failed          INTEGER NOT NULL DEFAULT 0,
    skipped         INTEGER NOT NULL DEFAULT 0,
    attempts        INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (subscription_id, day)
) STRICT, WITHOUT ROWID;
