-- edgehook origin schema, version 5: a claim and a settle move fewer index entries.

-- The settled indexes leave leased deliveries out too. A lease lasts the few milliseconds to
-- seconds of a send, yet every claim put each delivery into both indexes (its status and
-- updated_at change) and its settle took it out of both again before putting it back under its
-- final status: four index writes per delivery, now one into deliveries_leased and one out, for
-- rows that nothing looked up there but the rescue of expired leases and listing by status. Those
-- read deliveries_leased instead: one entry per delivery in flight, ordered by expiry, so the look
-- for expired leases reads at most the first one (status leads, constant, so that a search by
-- status = ? finds the index too). Queries that use the settled indexes repeat their condition
-- literally (settledSQL in deliveries.go), and those that use deliveries_leased repeat
-- status = 'leased'.
DROP INDEX deliveries_status_settled;
CREATE INDEX deliveries_status_settled ON deliveries(status, updated_at) WHERE status <> 'pending' AND status <> 'leased';
DROP INDEX deliveries_sub_settled;
CREATE INDEX deliveries_sub_settled ON deliveries(subscriber_id, status, updated_at) WHERE status <> 'pending' AND status <> 'leased';
CREATE INDEX deliveries_leased ON deliveries(status, lease_expires_at) WHERE status = 'leased';
