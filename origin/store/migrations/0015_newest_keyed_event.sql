-- edgehook origin schema, version 15: the events of each (subscriber, coalesce key), for a dead
-- delivery put back in the queue (retry, replay) to find whether a newer event with its key has
-- come since: then it is superseded instead of sent after the newer one (latest wins). Only keyed
-- rows are entries, so a subscriber without a coalescing rule costs it nothing.
CREATE INDEX deliveries_key_events ON deliveries(subscriber_id, coalesce_key, event_seq) WHERE coalesce_key <> '';
