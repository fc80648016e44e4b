-- While writes fail (a full disk, an I/O error), a node tries one small
-- write a second here to tell when they commit again. One row, rewritten
-- with a filler the size of the largest payload, so the write needs as many
-- free pages as the largest event: a database too full for it stays full to
-- the probe.
CREATE TABLE health_probe (
    id     INTEGER PRIMARY KEY,
    at     INTEGER NOT NULL,
    filler BLOB NOT NULL
) STRICT;
