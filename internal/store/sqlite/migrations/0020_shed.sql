-- When ingest began shedding the subscription (unix ns, 0: it is not shed),
-- as the first node to decide it kept it: nodes decide alike at their own
-- readings, so the owner is told once, with one time, and a restarted node
-- takes the shedding up instead of accepting the backlog again.
ALTER TABLE subscriptions ADD COLUMN shed_since INTEGER NOT NULL DEFAULT 0;
