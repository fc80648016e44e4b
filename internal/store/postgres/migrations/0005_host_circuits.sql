-- The node that dispatches a host publishes its circuit breaker here, so a
-- node asked for a subscription's health reports it whichever node owns the
-- host. Open with a past retry_at reads as half-open.
CREATE TABLE host_circuits (
    host       text COLLATE "C" PRIMARY KEY,
    open       boolean NOT NULL,
    retry_at   timestamptz,
    updated_at timestamptz NOT NULL
);
