-- An endpoint's headers (its credentials), sealed whole like the secrets
-- beside them; '' for none.
ALTER TABLE subscriptions ADD COLUMN headers TEXT NOT NULL DEFAULT '';
