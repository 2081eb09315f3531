-- edgehook origin schema, version 2.

-- The (status, updated_at) index leaves pending deliveries out. Every delivery is emitted pending,
-- and nothing looks pending deliveries up by status alone (claiming, coalescing, trimming and
-- listing go by subscriber or by seq), so indexing them cost every emitted row one more index
-- insert, and its claim one more move: about a quarter of the CPU of an emit. Queries that use
-- this index repeat its condition literally (status <> 'pending'): the planner does not infer it
-- from status = 'leased' or an IN list.
DROP INDEX deliveries_status;
CREATE INDEX deliveries_status_settled ON deliveries(status, updated_at) WHERE status <> 'pending';
