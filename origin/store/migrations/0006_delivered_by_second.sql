-- edgehook origin schema, version 6: a settle writes no per-subscriber index entry for a delivered row.

-- deliveries_sub_settled leaves delivered deliveries out. In a drain, every settle transaction
-- put a delivered entry under each of its subscribers (a page of the index per subscriber, about
-- a third of the WAL pages the transaction wrote), for one reader only: Stats' count of each
-- subscriber's deliveries of the last minute. That count is kept instead in delivered_by_second,
-- one row per second and subscriber that had deliveries, which settling adds to (settle.go) and
-- trims to the last minutes. Listing delivered deliveries walks the table, newest first. Queries
-- that use deliveries_sub_settled repeat its condition literally (subSettledSQL in deliveries.go).
CREATE TABLE delivered_by_second (
  second        INTEGER NOT NULL, -- unix seconds of the settle
  subscriber_id TEXT NOT NULL,
  n             INTEGER NOT NULL,
  PRIMARY KEY (second, subscriber_id)
) WITHOUT ROWID;
INSERT INTO delivered_by_second(second, subscriber_id, n)
  SELECT updated_at / 1000, subscriber_id, count(*) FROM deliveries
  WHERE status = 'delivered' AND status <> 'pending' AND status <> 'leased'
    AND updated_at >= (SELECT max(updated_at) FROM deliveries WHERE status = 'delivered' AND status <> 'pending' AND status <> 'leased') - 120000
  GROUP BY 1, 2;
DROP INDEX deliveries_sub_settled;
CREATE INDEX deliveries_sub_settled ON deliveries(subscriber_id, status, updated_at)
  WHERE status <> 'pending' AND status <> 'leased' AND status <> 'delivered';
DROP TRIGGER subscribers_counts_delete;
CREATE TRIGGER subscribers_counts_delete AFTER DELETE ON subscribers BEGIN
  DELETE FROM queue_counts WHERE subscriber_id = OLD.id;
  DELETE FROM delivered_by_second WHERE subscriber_id = OLD.id;
END;
