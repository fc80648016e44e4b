-- API keys get a name, a prefix to recognise them by (the plaintext is
-- never stored), an expiry, a revocation time and when they were last used
-- (written at most once a minute per key). 0 means unset.
ALTER TABLE api_keys ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN prefix TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN revoked_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN last_used_at INTEGER NOT NULL DEFAULT 0;

-- The audit log: one row per change, written in the change's transaction.
-- Kept for good (retention does not touch it). No foreign key: a row
-- outlives what it names. detail is a JSON object of names, never values
-- that are secret.
CREATE TABLE audit_log (
    id          TEXT PRIMARY KEY, -- aud_<ULID>: sorts by time
    at          INTEGER NOT NULL,
    tenant_id   TEXT NOT NULL,
    actor       TEXT NOT NULL,    -- admin, a key ID, or hookd
    action      TEXT NOT NULL,
    target_id   TEXT NOT NULL,
    remote_addr TEXT NOT NULL DEFAULT '',
    detail      TEXT NOT NULL DEFAULT '{}'
) STRICT;
CREATE INDEX audit_log_tenant ON audit_log(tenant_id, id);
