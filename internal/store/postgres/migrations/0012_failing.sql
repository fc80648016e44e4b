-- Whether a subscription is failing, kept by the result writes: since when
-- every attempt failed (NULL: the last attempt succeeded, or none yet) and
-- the last failed attempt; and the last operational alert sent about it
-- (alert_state 'failing' until it recovers, alerted_at the last 'failing'
-- alert), so a flapping endpoint alerts at most once an hour. Only adds.
ALTER TABLE subscriptions ADD COLUMN failing_since timestamptz;
ALTER TABLE subscriptions ADD COLUMN last_failure_at timestamptz;
ALTER TABLE subscriptions ADD COLUMN alert_state text NOT NULL DEFAULT 'ok';
ALTER TABLE subscriptions ADD COLUMN alerted_at timestamptz;
