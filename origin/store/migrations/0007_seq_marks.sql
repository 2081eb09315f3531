-- edgehook origin schema, version 7: an event or delivery seq is never handed out twice.

-- A delivery's public id is the store id and its seq, and the edge deduplicates on delivery ids
-- for a day. Deliveries took SQLite's rowid (the largest seq + 1) and events the largest seq + 1
-- too, so once a prune or a subscriber delete removed the newest rows, the next emit gave their
-- seqs again, and the edge could answer a new delivery "duplicate". These marks are the last seq
-- handed out of each table; emit reads and advances both once per group transaction and gives
-- seqs only past them (emit.go), and nothing else changes them. They start at the largest seq
-- present: seqs deleted before this migration are known nowhere.
INSERT INTO meta(key, value) VALUES
  ('events_seq', (SELECT coalesce(max(seq), 0) FROM events)),
  ('deliveries_seq', (SELECT coalesce(max(seq), 0) FROM deliveries));
