-- An ordered subscription's refill walked every pending row of the
-- subscription, checking each for a pending predecessor of its ordering
-- key, to find at most one due row per key: 30,000 pending over 4 keys
-- drained at about 13 a second. The index now keeps a subscription's
-- unordered rows (sequence 0) apart from its ordered ones, so a refill walks
-- the unordered ones alone, and takes the ordered heads from a short walk or
-- from one seek per key of deliveries_key_line (DeliveryDue). Still one
-- index entry per pending delivery.
DROP INDEX deliveries_subscription_due;
CREATE INDEX deliveries_subscription_due ON deliveries(subscription_id, sequence > 0, next_attempt_at, id) WHERE state = 'pending';
