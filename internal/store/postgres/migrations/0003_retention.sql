-- Retention removes events, deliveries and attempts past the retention
-- window. What they added up to is kept: per subscription and UTC day (of
-- the delivery's creation), how many were delivered, failed or skipped and
-- how many attempts they took. No foreign key: the counts outlive the rows.
CREATE TABLE daily_counts (
    subscription_id text COLLATE "C" NOT NULL,
    day             date NOT NULL,
    delivered       bigint NOT NULL DEFAULT 0,
    failed          bigint NOT NULL DEFAULT 0,
    skipped         bigint NOT NULL DEFAULT 0,
    attempts        bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (subscription_id, day)
);
