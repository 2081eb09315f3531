-- edgehook origin schema, version 16: when a subscriber was last resumed from a pause or a disable.

-- A delivery's max age counts from its age_from (its event's emit, or its manual retry), but not
-- through a hold of the operator's: a claim counts it from the later of that and its subscriber's
-- last resume (completeClaims). Kept on the subscriber, not written into each delivery, so the
-- deliveries that have no row (fanout ranges, migrations 0009 and 0011) have it too, and a resume
-- writes no more rows than before. 0: never resumed.
ALTER TABLE subscribers ADD COLUMN resumed_at INTEGER NOT NULL DEFAULT 0;
