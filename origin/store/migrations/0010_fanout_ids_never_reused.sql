-- edgehook origin schema, version 10: a fanout's id is never given twice.

-- Prune deletes the fanouts no event is of any more (fanout.go), and SQLite gave the largest id
-- deleted to the next fanout written. A process caches fanout ids by their set of subscribers:
-- one of version 9 still running on the file never drops that cache, and would have written its
-- next event of a pruned set under the id of another set, sending it to other subscribers. With
-- AUTOINCREMENT an id is never given again: such an event refers to no fanout, and goes to
-- nobody (deploy.md: restart older processes once a newer binary has touched the file). A
-- process of this version drops its cache when a prune changes meta fanouts_version.
CREATE TABLE fanouts_v10 (
  id       INTEGER PRIMARY KEY AUTOINCREMENT,
  ordinals TEXT NOT NULL UNIQUE,
  last_seq INTEGER NOT NULL DEFAULT 0
);
INSERT INTO fanouts_v10(id, ordinals, last_seq) SELECT id, ordinals, last_seq FROM fanouts;
DROP TABLE fanouts;
ALTER TABLE fanouts_v10 RENAME TO fanouts;
CREATE INDEX fanouts_last ON fanouts(last_seq);
