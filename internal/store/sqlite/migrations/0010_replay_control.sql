-- Replay control: a job puts back the delivery states it was asked for, at
-- its own pace, and can be cancelled. A cancelled job is written state
-- 'done' with cancelled_at set (0: not cancelled), as on PostgreSQL, where
-- a node of the previous release must take it for finished. Jobs written
-- before this get what every job did then: failed and skipped, 500/s.
ALTER TABLE replay_jobs ADD COLUMN states TEXT NOT NULL DEFAULT '["failed","skipped"]'; -- JSON array
ALTER TABLE replay_jobs ADD COLUMN rate REAL NOT NULL DEFAULT 500; -- deliveries put back per second, at most
ALTER TABLE replay_jobs ADD COLUMN cancelled_at INTEGER NOT NULL DEFAULT 0;
-- A subscription's jobs, newest first.
CREATE INDEX replay_jobs_subscription ON replay_jobs(subscription_id, id);
