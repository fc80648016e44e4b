-- Operational events that outlive a crash, and the figures of a recovery.
-- Only adds (rolling upgrades: what a node of the previous release does
-- meanwhile is in docs/operations.md).
--
-- A subscription hookd disabled owes its owner a hookd.subscription.disabled:
-- the event's payload, written in the disable's own transaction and cleared
-- once the event is written (NULL: none owed), so a failed write or a crash
-- between the two loses nothing: the lifecycle's scan sends what is owed.
ALTER TABLE subscriptions ADD COLUMN disabled_notice text;
-- What failing_since was when the subscription was alerted failing (NULL:
-- not alerted, or alerted by an older release): the success that ends it
-- clears failing_since, and the recovered event says how long it failed.
ALTER TABLE subscriptions ADD COLUMN alert_since timestamptz;
-- A replay job finished by its step owes a hookd.replay.completed, set in
-- the step's transaction and cleared once the event is written. Jobs
-- finished before this release owe nothing.
ALTER TABLE replay_jobs ADD COLUMN completed_notice boolean NOT NULL DEFAULT false;
-- The scan's reads: only the rows that owe one are in them.
CREATE INDEX IF NOT EXISTS subscriptions_disabled_notice ON subscriptions(id) WHERE disabled_notice IS NOT NULL;
CREATE INDEX IF NOT EXISTS replay_jobs_completed_notice ON replay_jobs(id) WHERE completed_notice;
