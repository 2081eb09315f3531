-- edgehook origin schema, version 4: claiming and settling count in Go too.

-- The status trigger no longer counts moves into or out of 'leased': claim (pending → leased), the
-- rescue of expired leases (leased → pending) and settle (leased → anything) are the only
-- statements that make them, and each adds its moves to queue_counts with one upsert per
-- transaction (counts.go), instead of two queue_counts writes per delivery row. The other moves
-- (supersede, trim, disable, resume, retry, replay) are rare or few, and keep the trigger.
DROP TRIGGER deliveries_count_update;
CREATE TRIGGER deliveries_count_update AFTER UPDATE OF status ON deliveries
  WHEN OLD.status <> NEW.status AND OLD.status <> 'leased' AND NEW.status <> 'leased' BEGIN
  UPDATE queue_counts SET n = n - 1 WHERE subscriber_id = OLD.subscriber_id AND status = OLD.status;
  INSERT INTO queue_counts(subscriber_id, status, n) VALUES (NEW.subscriber_id, NEW.status, 1)
    ON CONFLICT(subscriber_id, status) DO UPDATE SET n = n + 1;
END;
