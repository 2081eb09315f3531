-- edgehook origin schema, version 13: deliveries' index on event_seq keeps only the rows whose seq
-- does not hold their event.

-- Since migration 0009 a delivery's seq is its event's seq shifted left by 20 bits, or'ed with its
-- subscriber's ordinal, so the rows of an event are the seqs [event << 20, (event + 1) << 20): a
-- range of the table's own key, which the queries that look for an event's rows now read
-- (eventRowsSQL in deliveries.go). Only rows written before that migration, or by a version-8
-- binary after it, have other seqs: the index keeps those alone, and a row a settle writes is no
-- longer an entry in it too. In a drain, `make bench` read about 0.53× of the ceiling with the
-- entry and 0.60–0.65× without.
DROP INDEX deliveries_event;
CREATE INDEX deliveries_event_legacy ON deliveries(event_seq) WHERE seq >> 20 <> event_seq;

-- Likewise deliveries_status_settled leaves out the delivered rows whose seq holds their event.
-- Its one reader, prune, finds those by walking the rows of the events created before the cutoff
-- in the key's order (prunableDeliveredSQL); dead and superseded deliveries, and the delivered rows
-- of other seqs, it still finds through the index. Building it reads the table once.
DROP INDEX deliveries_status_settled;
CREATE INDEX deliveries_status_settled ON deliveries(status, updated_at)
  WHERE status <> 'pending' AND status <> 'leased' AND (status <> 'delivered' OR seq >> 20 <> event_seq);
