-- edgehook origin schema, version 12: the first attempt of a delivery leased as part of a range is
-- kept on the row its settle writes.

-- In a drain nearly every delivery is settled once, by its first attempt, with the insert of its
-- row (migration 0011); its attempts row was a second insert, with its index entry, for the same
-- delivery: about a tenth of the settle-and-claim transaction's CPU per delivery. That attempt now
-- goes into these columns of the row instead (first_at 0: none there). Nothing precedes it: a
-- delivery leased as part of a range has no row, and so no attempts, before that settle. Later
-- attempts (after a retry or a replay) go to attempts as before, and so does every attempt of a
-- delivery settled as a row.
ALTER TABLE deliveries ADD COLUMN first_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE deliveries ADD COLUMN first_status INTEGER NOT NULL DEFAULT 0;
ALTER TABLE deliveries ADD COLUMN first_latency_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE deliveries ADD COLUMN first_outcome TEXT NOT NULL DEFAULT '';
ALTER TABLE deliveries ADD COLUMN first_error TEXT NOT NULL DEFAULT '';
ALTER TABLE deliveries ADD COLUMN first_excerpt TEXT NOT NULL DEFAULT '';

-- Every attempt, in either place. ord orders a delivery's attempts: the one on its row is its
-- first, and the attempts rows follow in the order they were written (their id).
CREATE VIEW all_attempts AS
  SELECT seq AS delivery_seq, 0 AS ord, 1 AS number, first_at AS at, first_status AS status, first_latency_ms AS latency_ms,
    first_outcome AS outcome, first_error AS error, first_excerpt AS excerpt
  FROM deliveries WHERE first_at > 0
  UNION ALL SELECT delivery_seq, id, number, at, status, latency_ms, outcome, error, excerpt FROM attempts;
