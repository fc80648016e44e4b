-- A bulk replay is a job: it puts a subscription's failed and skipped
-- deliveries from a time range back in line, a batch at a time, and records
-- its progress so a customer can follow it (and it resumes after a restart).
CREATE TABLE replay_jobs (
    id              TEXT PRIMARY KEY,
    tenant_id       TEXT NOT NULL,
    subscription_id TEXT NOT NULL REFERENCES subscriptions(id),
    since           INTEGER NOT NULL,
    until           INTEGER NOT NULL, -- 0: no upper bound
    event_types     TEXT NOT NULL,    -- JSON array; empty: every type
    state           TEXT NOT NULL CHECK (state IN ('running', 'done')),
    replayed        INTEGER NOT NULL DEFAULT 0,
    cursor          TEXT NOT NULL DEFAULT '', -- last delivery ID considered
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;
CREATE INDEX replay_jobs_running ON replay_jobs(created_at) WHERE state = 'running';
