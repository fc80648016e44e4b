-- An endpoint's 429 back-off in force, as its owner publishes it (deliveries
-- a second: the rate it was cut to, and where its recovery ends; 0: none).
-- In memory alone, a restart or a shard's move sent an endpoint answering
-- 429 its whole floor at once.
ALTER TABLE host_circuits ADD COLUMN cut_rate double precision NOT NULL DEFAULT 0;
ALTER TABLE host_circuits ADD COLUMN cut_ceiling double precision NOT NULL DEFAULT 0;
