-- edgehook origin schema, version 14: a delivery leased as part of a range and delivered at its
-- first attempt is written without the columns its event and its other columns already hold.

-- In a drain nearly every row a settle writes is such a delivery, and the rows of one transaction
-- land on a dozen pages of deliveries or more (each subscriber's cursor is at its own event, and a
-- page holds the rows of a few events): the narrower the row, the fewer the pages a settle writes.
-- Such a row (migration 0011's insert, in settle.go) is marked by created_at = 0, and leaves out:
--   created_at, age_from, next_attempt_at: its event's created_at, which a delivery's always are;
--   delivered_at: its updated_at, the settle's time, which a delivered row's always is;
--   first_outcome: 'delivered', stored as '' (an edge's 'duplicate' is stored as it is).
-- Readers put them back: scanDelivery (deliveries.go) and the two views below. A delivered row
-- never changes again, so nothing else ever reads it. Rows written before this migration, and
-- every other row, keep every column.
DROP VIEW all_attempts;
CREATE VIEW all_attempts AS
  SELECT seq AS delivery_seq, 0 AS ord, 1 AS number, first_at AS at, first_status AS status, first_latency_ms AS latency_ms,
    CASE WHEN created_at = 0 AND first_outcome = '' THEN 'delivered' ELSE first_outcome END AS outcome,
    first_error AS error, first_excerpt AS excerpt
  FROM deliveries WHERE first_at > 0
  UNION ALL SELECT delivery_seq, id, number, at, status, latency_ms, outcome, error, excerpt FROM attempts;

DROP VIEW all_deliveries;
CREATE VIEW all_deliveries AS
  SELECT seq, event_seq, subscriber_id, status, reason, coalesce_key, attempts,
    CASE created_at WHEN 0 THEN (SELECT e.created_at FROM events e WHERE e.seq = event_seq) ELSE next_attempt_at END AS next_attempt_at,
    CASE created_at WHEN 0 THEN (SELECT e.created_at FROM events e WHERE e.seq = event_seq) ELSE age_from END AS age_from,
    lease_token, lease_expires_at, last_status, last_error,
    CASE created_at WHEN 0 THEN (SELECT e.created_at FROM events e WHERE e.seq = event_seq) ELSE created_at END AS created_at,
    updated_at, CASE created_at WHEN 0 THEN updated_at ELSE delivered_at END AS delivered_at FROM deliveries
  UNION ALL SELECT * FROM fanout_deliveries
  UNION ALL SELECT * FROM leased_deliveries;
