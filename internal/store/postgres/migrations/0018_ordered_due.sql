-- An ordered subscription's refill walked every pending row of the
-- subscription, checking each for a pending predecessor of its ordering
-- key, to find at most one due row per key: 30,000 pending over 4 keys
-- drained at about 4 a second, one backend at 94 % CPU. The index now keeps
-- a subscription's unordered rows (sequence 0) apart from its ordered ones,
-- so a refill walks the unordered ones alone, and takes the ordered heads
-- from a short walk or from one probe per key of deliveries_key_line
-- (DeliveryDue). Still one index entry per pending delivery. The key is an
-- integer, not a boolean: the planner rewrites NOT (sequence > 0) to
-- sequence <= 0, which no longer matches a boolean index expression.
DROP INDEX deliveries_subscription_due;
CREATE INDEX deliveries_subscription_due ON deliveries(subscription_id, ((sequence > 0)::int), next_attempt_at, id) WHERE state = 'pending';
