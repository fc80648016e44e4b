-- The Svix-compatible API (docs/svix.md). Only adds: a node of the
-- previous release ignores the new columns and table.
--
-- A tenant is an application: its uid when that is not itself the tenant
-- ID ('' none), metadata (a JSON object, '' none), the rate_limit its new
-- endpoints start with, when it last changed (NULL: never) and when it
-- was deleted (NULL while live).
ALTER TABLE tenants ADD COLUMN uid text NOT NULL DEFAULT '';
ALTER TABLE tenants ADD COLUMN metadata text NOT NULL DEFAULT '';
ALTER TABLE tenants ADD COLUMN rate_limit integer NOT NULL DEFAULT 0;
ALTER TABLE tenants ADD COLUMN updated_at timestamptz;
ALTER TABLE tenants ADD COLUMN deleted_at timestamptz;
CREATE UNIQUE INDEX tenants_uid ON tenants(uid) WHERE uid <> '' AND deleted_at IS NULL;

-- A subscription is an endpoint: its uid ('' none), unique among its
-- tenant's live ones, and the rest of what that API keeps as one JSON
-- object ('' for a subscription made through /v1): whether attempts carry
-- svix-* headers, its description and metadata.
ALTER TABLE subscriptions ADD COLUMN uid text NOT NULL DEFAULT '';
ALTER TABLE subscriptions ADD COLUMN svix text NOT NULL DEFAULT '';
CREATE UNIQUE INDEX subscriptions_uid ON subscriptions(tenant_id, uid) WHERE uid <> '' AND deleted_at IS NULL;

-- The event types endpoints may filter on, organisation-wide as in Svix.
CREATE TABLE event_types (
    name          text COLLATE "C" PRIMARY KEY,
    description   text NOT NULL,
    archived      boolean NOT NULL DEFAULT false,
    deprecated    boolean NOT NULL DEFAULT false,
    group_name    text NOT NULL DEFAULT '',
    feature_flags text[] NOT NULL DEFAULT '{}',
    schemas       text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL
);

-- A tenant's messages, newest first. Built inside the migration's
-- transaction, which holds writes to events for the build; an operator
-- may build it CONCURRENTLY beforehand (docs/operations.md).
CREATE INDEX IF NOT EXISTS events_tenant ON events(tenant_id, id);
