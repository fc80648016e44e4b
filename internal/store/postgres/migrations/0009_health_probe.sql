-- While writes fail (the server unreachable, disk_full), each node tries one
-- small write a second here to tell when they commit again. One row, shared:
-- only adds a table, so nodes of the previous release run beside it.
CREATE TABLE health_probe (
    id int PRIMARY KEY,
    at timestamptz NOT NULL
);
