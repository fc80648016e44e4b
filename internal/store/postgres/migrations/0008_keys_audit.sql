-- API keys get a name, a prefix to recognise them by (the plaintext is
-- never stored), an expiry, a revocation time and when they were last used
-- (written at most once a minute per key). NULL means unset. Only adds:
-- nodes of the previous release keep working beside these (but do not
-- refuse revoked or expired keys until they are upgraded).
ALTER TABLE api_keys
    ADD COLUMN name         text NOT NULL DEFAULT '',
    ADD COLUMN prefix       text NOT NULL DEFAULT '',
    ADD COLUMN expires_at   timestamptz,
    ADD COLUMN revoked_at   timestamptz,
    ADD COLUMN last_used_at timestamptz;

-- The audit log: one row per change, written in the change's transaction.
-- Kept for good (retention does not touch it). No foreign key: a row
-- outlives what it names. detail holds names, never values that are secret.
CREATE TABLE audit_log (
    id          text COLLATE "C" PRIMARY KEY, -- aud_<ULID>: sorts by time
    at          timestamptz NOT NULL,
    tenant_id   text COLLATE "C" NOT NULL,
    actor       text NOT NULL,                -- admin, a key ID, or hookd
    action      text NOT NULL,
    target_id   text NOT NULL,
    remote_addr text NOT NULL DEFAULT '',
    detail      jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_tenant ON audit_log(tenant_id, id);
