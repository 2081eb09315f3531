-- edgehook origin schema, version 1. Times are unix milliseconds.

-- meta holds the store's identity: a random id that makes delivery ids unique across databases
-- (the edge deduplicates on them) and a version bumped on every subscriber change.
CREATE TABLE meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE subscribers (
  id            TEXT PRIMARY KEY,
  url           TEXT NOT NULL,
  events        TEXT NOT NULL,             -- JSON array of patterns
  profile       TEXT NOT NULL,
  legacy_prefix TEXT NOT NULL DEFAULT '',
  mode          TEXT NOT NULL,
  rate_per_sec  REAL NOT NULL,
  burst         INTEGER NOT NULL,
  max_in_flight INTEGER NOT NULL,
  timeout_ms    INTEGER NOT NULL,
  headers       TEXT NOT NULL DEFAULT '{}', -- JSON object
  coalesce      TEXT NOT NULL DEFAULT '',   -- JSON wire.CoalesceRule, '' for none
  state         TEXT NOT NULL DEFAULT 'active',
  state_reason  TEXT NOT NULL DEFAULT '',
  created_at    INTEGER NOT NULL,
  updated_at    INTEGER NOT NULL
);

CREATE TABLE subscriber_secrets (
  subscriber_id TEXT NOT NULL REFERENCES subscribers(id) ON DELETE CASCADE,
  secret        TEXT NOT NULL,
  created_at    INTEGER NOT NULL,
  expires_at    INTEGER NOT NULL DEFAULT 0, -- 0: current
  PRIMARY KEY (subscriber_id, secret)
) WITHOUT ROWID;

-- limiter is the runtime state that claiming reads and writes, shared by every process on the file:
-- the token bucket, the Retry-After pause, the circuit breaker and the round-robin position.
CREATE TABLE limiter (
  subscriber_id        TEXT PRIMARY KEY REFERENCES subscribers(id) ON DELETE CASCADE,
  tokens               REAL NOT NULL,
  refilled_at          INTEGER NOT NULL,
  paused_until         INTEGER NOT NULL DEFAULT 0,
  consecutive_failures INTEGER NOT NULL DEFAULT 0,
  circuit              TEXT NOT NULL DEFAULT 'closed', -- closed | open | probing
  circuit_until        INTEGER NOT NULL DEFAULT 0,
  circuit_opens        INTEGER NOT NULL DEFAULT 0,     -- consecutive openings, grows the cool-down
  last_claim_at        INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

CREATE TABLE events (
  seq          INTEGER PRIMARY KEY,
  id           TEXT NOT NULL UNIQUE,
  type         TEXT NOT NULL,
  body         BLOB NOT NULL,   -- the exact bytes received
  body_hash    BLOB NOT NULL,   -- sha256(type NUL body), for idempotent re-emits
  coalesce_key TEXT NOT NULL DEFAULT '',
  created_at   INTEGER NOT NULL
);
-- Retention finds old events without scanning the table.
CREATE INDEX events_created ON events(created_at);

CREATE TABLE deliveries (
  seq              INTEGER PRIMARY KEY,
  event_seq        INTEGER NOT NULL REFERENCES events(seq) ON DELETE CASCADE,
  subscriber_id    TEXT NOT NULL REFERENCES subscribers(id) ON DELETE CASCADE,
  status           TEXT NOT NULL,
  reason           TEXT NOT NULL DEFAULT '',
  coalesce_key     TEXT NOT NULL DEFAULT '',
  attempts         INTEGER NOT NULL DEFAULT 0,
  next_attempt_at  INTEGER NOT NULL,
  age_from         INTEGER NOT NULL, -- max age counts from here (reset by a manual retry)
  lease_token      TEXT NOT NULL DEFAULT '',
  lease_expires_at INTEGER NOT NULL DEFAULT 0,
  last_status      INTEGER NOT NULL DEFAULT 0,
  last_error       TEXT NOT NULL DEFAULT '',
  created_at       INTEGER NOT NULL,
  updated_at       INTEGER NOT NULL,
  delivered_at     INTEGER NOT NULL DEFAULT 0
);

-- "What is due" per subscriber, first attempts and retries apart so claiming can prefer the former;
-- partial, so a million delivered rows cost these indexes nothing.
CREATE INDEX deliveries_due_first ON deliveries(subscriber_id, next_attempt_at) WHERE status = 'pending' AND attempts = 0;
CREATE INDEX deliveries_due_retry ON deliveries(subscriber_id, next_attempt_at) WHERE status = 'pending' AND attempts > 0;
-- Coalescing looks up a subscriber's older pending delivery with the same key.
CREATE INDEX deliveries_coalesce ON deliveries(subscriber_id, coalesce_key) WHERE status = 'pending' AND coalesce_key <> '';
-- Listing, replay, retention, backlog trimming, and the rescue of expired leases (status 'leased').
CREATE INDEX deliveries_event ON deliveries(event_seq);
CREATE INDEX deliveries_sub_status ON deliveries(subscriber_id, status, updated_at);
CREATE INDEX deliveries_status ON deliveries(status, updated_at);

CREATE TABLE attempts (
  id            INTEGER PRIMARY KEY,
  delivery_seq  INTEGER NOT NULL REFERENCES deliveries(seq) ON DELETE CASCADE,
  number        INTEGER NOT NULL,
  at            INTEGER NOT NULL,
  status        INTEGER NOT NULL,
  latency_ms    INTEGER NOT NULL,
  outcome       TEXT NOT NULL,
  error         TEXT NOT NULL DEFAULT '',
  excerpt       TEXT NOT NULL DEFAULT ''
);
CREATE INDEX attempts_delivery ON attempts(delivery_seq);

-- queue_counts keeps the number of deliveries per subscriber and status, maintained by triggers in
-- the same transaction as the change, so the backlog caps, the queue depth and the in-flight count
-- are O(1) reads instead of counts over a million rows.
CREATE TABLE queue_counts (
  subscriber_id TEXT NOT NULL,
  status        TEXT NOT NULL,
  n             INTEGER NOT NULL,
  PRIMARY KEY (subscriber_id, status)
) WITHOUT ROWID;

CREATE TRIGGER deliveries_count_insert AFTER INSERT ON deliveries BEGIN
  INSERT INTO queue_counts(subscriber_id, status, n) VALUES (NEW.subscriber_id, NEW.status, 1)
    ON CONFLICT(subscriber_id, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER deliveries_count_update AFTER UPDATE OF status ON deliveries WHEN OLD.status <> NEW.status BEGIN
  UPDATE queue_counts SET n = n - 1 WHERE subscriber_id = OLD.subscriber_id AND status = OLD.status;
  INSERT INTO queue_counts(subscriber_id, status, n) VALUES (NEW.subscriber_id, NEW.status, 1)
    ON CONFLICT(subscriber_id, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER deliveries_count_delete AFTER DELETE ON deliveries BEGIN
  UPDATE queue_counts SET n = n - 1 WHERE subscriber_id = OLD.subscriber_id AND status = OLD.status;
END;

CREATE TRIGGER subscribers_counts_delete AFTER DELETE ON subscribers BEGIN
  DELETE FROM queue_counts WHERE subscriber_id = OLD.id;
END;
