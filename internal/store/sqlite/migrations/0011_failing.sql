-- Whether a subscription is failing, kept by the result writes: since when
-- every attempt failed (0: the last attempt succeeded, or none yet) and the
-- last failed attempt; and the last operational alert sent about it
-- (alert_state 'failing' until it recovers, alerted_at unix ns of the last
-- 'failing' alert), so a flapping endpoint alerts at most once an hour.
ALTER TABLE subscriptions ADD COLUMN failing_since INTEGER NOT NULL DEFAULT 0;
ALTER TABLE subscriptions ADD COLUMN last_failure_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE subscriptions ADD COLUMN alert_state TEXT NOT NULL DEFAULT 'ok';
ALTER TABLE subscriptions ADD COLUMN alerted_at INTEGER NOT NULL DEFAULT 0;
