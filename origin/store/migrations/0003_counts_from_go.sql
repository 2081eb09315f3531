-- edgehook origin schema, version 3: fewer writes per emitted delivery.

-- Emit counts the rows it inserts itself, with one upsert per transaction (emit.go), instead of a
-- trigger that ran a sub-program and an upsert for every delivery row. Changes of status and
-- deletes still count through their triggers. Emit is the only statement that inserts deliveries.
DROP TRIGGER deliveries_count_insert;

-- The (subscriber, status, updated_at) index leaves pending deliveries out, as
-- deliveries_status_settled does: a subscriber's pending deliveries are already in
-- deliveries_due_first or deliveries_due_retry, which backlog trimming and disabling walk instead.
-- Queries that use this index repeat its condition literally (status <> 'pending').
DROP INDEX deliveries_sub_status;
CREATE INDEX deliveries_sub_settled ON deliveries(subscriber_id, status, updated_at) WHERE status <> 'pending';
