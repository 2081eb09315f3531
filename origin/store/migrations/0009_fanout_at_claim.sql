-- edgehook origin schema, version 9: an event's deliveries become rows when they are claimed.

-- Emit wrote one delivery row per matching subscriber, each with its index entries: twelve
-- subscribers made an event cost twelve rows, and the rows were most of an emit's work. Now emit
-- writes the event with its fanout, the set of subscribers it is for (matched at emit, so a later
-- filter change applies to later events only), and the rows are written by the claim that leases
-- them, one insert instead of an insert and an update. Subscribers whose coalesce rule applies to
-- an event still get a row at emit: a newer event supersedes it there.
--
-- A subscriber's cursor is the last event seq up to which its fanout deliveries are rows (claimed,
-- or written dead or held): those of the events past it are pending, and counted pending in
-- queue_counts from emit on. A delivery's seq is (event seq << 20) | the subscriber's ordinal, for
-- a row or not, so its public id exists before its row. An ordinal is never given twice. Seqs
-- handed out before this migration are below every such seq: they were a count of the deliveries,
-- fewer than 2^20 for each of the events before.
ALTER TABLE subscribers ADD COLUMN ordinal INTEGER NOT NULL DEFAULT 0;
UPDATE subscribers SET ordinal = (SELECT count(*) FROM subscribers o WHERE o.rowid < subscribers.rowid);
CREATE UNIQUE INDEX subscribers_ordinal ON subscribers(ordinal);
-- A binary of version 8 still running on the file gives its first new row the seq past the
-- deliveries mark when the mark is above every stored seq: at 2^62 the mark keeps such rows above
-- every seq of this scheme, instead of on the seq of a fanout delivery of the same event.
UPDATE meta SET value = 4611686018427387904 WHERE key = 'deliveries_seq';

-- next_ordinal is the ordinal the next subscriber created gets.
INSERT INTO meta(key, value) VALUES ('next_ordinal', (SELECT count(*) FROM subscribers));

-- No event before this migration has a fanout, and a new subscriber's ordinal is in no fanout yet,
-- so every cursor starts at 0.
ALTER TABLE limiter ADD COLUMN cursor INTEGER NOT NULL DEFAULT 0;

ALTER TABLE events ADD COLUMN fanout INTEGER NOT NULL DEFAULT 0; -- 0: none
-- A claim finds a subscriber's next events through this index, one search per fanout it is in.
CREATE INDEX events_fanout ON events(fanout, seq) WHERE fanout <> 0;

-- A fanout is written once, by the first emit that needs it, and its subscribers never change:
-- ordinals is the JSON array of their ordinals, ascending. Ordinals, not ids: a subscriber deleted
-- and created again under its id is a new subscriber, in none of the old fanouts. last_seq is its
-- newest event: a claim searches only the fanouts with events past the subscriber's cursor.
CREATE TABLE fanouts (
  id       INTEGER PRIMARY KEY,
  ordinals TEXT NOT NULL UNIQUE,
  last_seq INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX fanouts_last ON fanouts(last_seq);
CREATE TABLE fanout_members (
  fanout  INTEGER NOT NULL REFERENCES fanouts(id),
  ordinal INTEGER NOT NULL,
  PRIMARY KEY (fanout, ordinal)
) WITHOUT ROWID;
CREATE INDEX fanout_members_ordinal ON fanout_members(ordinal, fanout);

-- The pending deliveries that are not rows yet, with a row's columns. CROSS JOIN keeps events the
-- outer loop, whatever else a query filters on: listing reads the newest events first and stops
-- at its page, where starting from a subscriber sorted every delivery of its backlog.
CREATE VIEW fanout_deliveries AS
  SELECT (e.seq << 20) | s.ordinal AS seq, e.seq AS event_seq, s.id AS subscriber_id, 'pending' AS status, '' AS reason,
    '' AS coalesce_key, 0 AS attempts, e.created_at AS next_attempt_at, e.created_at AS age_from, '' AS lease_token,
    0 AS lease_expires_at, 0 AS last_status, '' AS last_error, e.created_at AS created_at, e.created_at AS updated_at,
    0 AS delivered_at
  FROM events e CROSS JOIN fanout_members m ON m.fanout = e.fanout CROSS JOIN subscribers s ON s.ordinal = m.ordinal
    CROSS JOIN limiter l ON l.subscriber_id = s.id
  WHERE e.fanout <> 0 AND e.seq > l.cursor;

-- Every delivery, a row or not.
CREATE VIEW all_deliveries AS
  SELECT seq, event_seq, subscriber_id, status, reason, coalesce_key, attempts, next_attempt_at, age_from, lease_token,
    lease_expires_at, last_status, last_error, created_at, updated_at, delivered_at FROM deliveries
  UNION ALL SELECT * FROM fanout_deliveries;
