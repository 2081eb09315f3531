-- edgehook origin schema, version 8: a delivery's attempts go with it, by trigger.

-- Foreign keys are not enforced (Open, store.go), so ON DELETE CASCADE no longer removes a
-- delivery's attempts. This trigger does, for every delete of deliveries (retention, a
-- subscriber's delete, any later one): one indexed delete per row, the work the cascade did. A
-- list of the deleted seqs built by the store instead grew with the deliveries deleted at once, a
-- subscriber's whole retained history.
CREATE TRIGGER deliveries_attempts_delete AFTER DELETE ON deliveries BEGIN
  DELETE FROM attempts WHERE delivery_seq = OLD.seq;
END;
