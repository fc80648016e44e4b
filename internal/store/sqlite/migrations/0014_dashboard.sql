-- The dashboard as a customer portal.
--
-- A subscription's last failed attempt beside failing_since: its status (0:
-- no HTTP answer), error and the first bytes of its answer, written by the
-- result writes' one conditional UPDATE per failing subscription, so a
-- list of endpoints says why each fails without reading attempts.
ALTER TABLE subscriptions ADD COLUMN last_failure_status INTEGER NOT NULL DEFAULT 0;
ALTER TABLE subscriptions ADD COLUMN last_failure_error TEXT NOT NULL DEFAULT '';
ALTER TABLE subscriptions ADD COLUMN last_failure_response TEXT NOT NULL DEFAULT '';
-- The subscriptions failing now, for an operator's view across tenants:
-- only those rows are in it, so it costs a write only when one starts or
-- keeps failing.
CREATE INDEX subscriptions_failing ON subscriptions(id) WHERE failing_since > 0 AND deleted_at IS NULL;
-- The tenant-wide logs, newest first, each bounded by its time range:
-- events by time, and events of one type by time (which also lists the
-- types a tenant sent, a seek per type). The delivery log walks them too,
-- reaching each event's deliveries by their (event_id, subscription_id)
-- key: events are only inserted, so these cost two index entries per
-- event and nothing after, where an index on deliveries would be written
-- again by result writes.
-- events_tenant_time replaces 0013's events_tenant (tenant_id, id), which
-- serves no time range; this one also lists a tenant's messages newest first.
DROP INDEX IF EXISTS events_tenant;
CREATE INDEX events_tenant_time ON events(tenant_id, created_at, id);
CREATE INDEX events_tenant_type ON events(tenant_id, type, created_at, id);
-- What an endpoint's answer said in its headers, one "Name: value" a line,
-- whole lines up to 1 KiB, beside the first KiB of its body.
ALTER TABLE attempts ADD COLUMN response_headers TEXT NOT NULL DEFAULT '';
-- Portal links: a one-time sign-in to one tenant's dashboard. The token is
-- stored only as its SHA-256; exchanging it marks it used (used_at, the key
-- it became) in the same transaction as the portal-scoped key it makes.
ALTER TABLE api_keys ADD COLUMN scope TEXT NOT NULL DEFAULT '';
CREATE TABLE portal_tokens (
    id         TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants(id),
    hash       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at    INTEGER NOT NULL DEFAULT 0,
    key_id     TEXT NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX portal_tokens_tenant ON portal_tokens(tenant_id, expires_at);
