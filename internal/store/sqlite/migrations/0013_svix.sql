-- The Svix-compatible API (docs/svix.md). A tenant is an application:
-- its uid when that is not itself the tenant ID ('' none), metadata (a
-- JSON object, '' none), the rate_limit its new endpoints start with, when
-- it last changed (0: never) and when it was deleted (NULL while live).
ALTER TABLE tenants ADD COLUMN uid TEXT NOT NULL DEFAULT '';
ALTER TABLE tenants ADD COLUMN metadata TEXT NOT NULL DEFAULT '';
ALTER TABLE tenants ADD COLUMN rate_limit INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tenants ADD COLUMN updated_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tenants ADD COLUMN deleted_at INTEGER;
CREATE UNIQUE INDEX tenants_uid ON tenants(uid) WHERE uid <> '' AND deleted_at IS NULL;

-- A subscription is an endpoint: its uid ('' none), unique among its
-- tenant's live ones, and the rest of what that API keeps as one JSON
-- object ('' for a subscription made through /v1): whether attempts carry
-- svix-* headers, its description and metadata.
ALTER TABLE subscriptions ADD COLUMN uid TEXT NOT NULL DEFAULT '';
ALTER TABLE subscriptions ADD COLUMN svix TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX subscriptions_uid ON subscriptions(tenant_id, uid) WHERE uid <> '' AND deleted_at IS NULL;

-- The event types endpoints may filter on, organisation-wide as in Svix.
CREATE TABLE event_types (
    name          TEXT PRIMARY KEY,
    description   TEXT NOT NULL,
    archived      INTEGER NOT NULL DEFAULT 0,
    deprecated    INTEGER NOT NULL DEFAULT 0,
    group_name    TEXT NOT NULL DEFAULT '',
    feature_flags TEXT NOT NULL DEFAULT '[]',
    schemas       TEXT NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
) STRICT;

-- A tenant's messages, newest first.
CREATE INDEX events_tenant ON events(tenant_id, id);
