-- host_circuits now holds endpoints' circuits too, keyed by subscription ID
-- in the host column (a subscription ID has no colon, a host:port always
-- does), and a Retry-After pause in force for either kind.
ALTER TABLE host_circuits ADD COLUMN paused_until timestamptz;
