-- edgehook origin schema, version 11: a claim leases fanout deliveries as a range of events, and
-- their rows are written when they settle.

-- A claim wrote each fanout delivery it leased as a row, and its settle updated that row: an
-- insert and an update, with their index entries, for every delivery. Now the claim writes one
-- lease per subscriber: the events past the cursor it took (after_seq, through_seq], which it
-- then moves the cursor over. The deliveries of those events in the subscriber's fanouts that have
-- no row are leased by it; the settle writes each one's row in its final state, in one insert.
-- remaining counts the deliveries of the range not settled yet: the lease goes when it is 0, and
-- when it expires, its deliveries still without a row are written pending (rescue, claim.go).
-- Rows leased before this migration keep their lease on the row, and settle and expire as before.
CREATE TABLE leases (
  subscriber_id TEXT NOT NULL,
  token         TEXT NOT NULL,
  ordinal       INTEGER NOT NULL, -- the subscriber's
  after_seq     INTEGER NOT NULL,
  through_seq   INTEGER NOT NULL,
  claimed_at    INTEGER NOT NULL,
  expires_at    INTEGER NOT NULL,
  remaining     INTEGER NOT NULL,
  PRIMARY KEY (subscriber_id, token)
) WITHOUT ROWID;

-- all_deliveries gains the leased deliveries that are not rows; fanout_deliveries stays the pending
-- ones, whose listing walks the events newest first.
DROP VIEW all_deliveries;

-- The leased deliveries that are not rows: the events of each lease's range in its subscriber's
-- fanouts, without a row. Leases drive the loop: there are a few per subscriber at most.
CREATE VIEW leased_deliveries AS
  SELECT (e.seq << 20) | ls.ordinal AS seq, e.seq AS event_seq, ls.subscriber_id AS subscriber_id, 'leased' AS status, '' AS reason,
    '' AS coalesce_key, 0 AS attempts, e.created_at AS next_attempt_at, e.created_at AS age_from, ls.token AS lease_token,
    ls.expires_at AS lease_expires_at, 0 AS last_status, '' AS last_error, e.created_at AS created_at, ls.claimed_at AS updated_at,
    0 AS delivered_at
  FROM leases ls CROSS JOIN fanout_members m ON m.ordinal = ls.ordinal
    CROSS JOIN events e INDEXED BY events_fanout ON e.fanout = m.fanout AND e.fanout <> 0 AND e.seq > ls.after_seq AND e.seq <= ls.through_seq
  WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.seq = (e.seq << 20) | ls.ordinal);

-- Every delivery, a row or not.
CREATE VIEW all_deliveries AS
  SELECT seq, event_seq, subscriber_id, status, reason, coalesce_key, attempts, next_attempt_at, age_from, lease_token,
    lease_expires_at, last_status, last_error, created_at, updated_at, delivered_at FROM deliveries
  UNION ALL SELECT * FROM fanout_deliveries
  UNION ALL SELECT * FROM leased_deliveries;
