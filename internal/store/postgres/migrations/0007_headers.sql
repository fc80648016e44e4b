-- An endpoint's headers (its credentials), sealed whole like the secrets
-- beside them; '' for none. Only adds: a node of the previous release
-- ignores it (but see docs/operations.md on sealing).
ALTER TABLE subscriptions ADD COLUMN headers text NOT NULL DEFAULT '';
