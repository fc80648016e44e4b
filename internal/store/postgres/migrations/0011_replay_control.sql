-- Replay control: a job puts back the delivery states it was asked for, at
-- its own pace, and can be cancelled. Only adds. A cancelled job is written
-- state 'done' with cancelled_at set, so a node of the previous release,
-- which knows only running and done, never steps it. Jobs that release
-- writes get what every job did then: failed and skipped, 500/s.
ALTER TABLE replay_jobs
    ADD COLUMN states       text[] NOT NULL DEFAULT '{failed,skipped}',
    ADD COLUMN rate         double precision NOT NULL DEFAULT 500, -- deliveries put back per second, at most
    ADD COLUMN cancelled_at timestamptz;
-- A subscription's jobs, newest first.
CREATE INDEX replay_jobs_subscription ON replay_jobs(subscription_id, id);
