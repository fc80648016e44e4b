-- Dispatch works per subscription (a lane inside its host's queue) and, for
-- ordered subscriptions, per ordering key: give both their own partial
-- indexes over pending work, and carry the ordering key on the delivery.
ALTER TABLE deliveries ADD COLUMN ordering_key TEXT NOT NULL DEFAULT '';
-- When the current round of retries began (creation, or the last replay):
-- a round that outlives the retry window while the endpoint is unavailable
-- is failed without burning attempts.
ALTER TABLE deliveries ADD COLUMN round_started_at INTEGER NOT NULL DEFAULT 0;
UPDATE deliveries SET round_started_at = created_at;
UPDATE deliveries SET ordering_key = (SELECT e.ordering_key FROM events e WHERE e.id = deliveries.event_id)
    WHERE sequence > 0;
CREATE INDEX deliveries_subscription_due ON deliveries(subscription_id, next_attempt_at, id) WHERE state = 'pending';
CREATE INDEX deliveries_key_line ON deliveries(subscription_id, ordering_key, sequence) WHERE state = 'pending' AND sequence > 0;
CREATE INDEX deliveries_subscription_failed ON deliveries(subscription_id, created_at) WHERE state = 'failed';
DROP INDEX deliveries_host_due;
