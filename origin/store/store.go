// Package store is the origin's durable queue: subscribers, events, deliveries and attempts in one
// SQLite file (modernc.org/sqlite, no cgo). It owns every SQL statement of the origin.
//
// Several processes may open the same file at once (a daemon plus cron-started drainers): every
// decision that must be shared — leases, token buckets, pauses, circuit breakers — lives in the
// database and is changed only inside write transactions.
package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Synchronous modes. NORMAL (the default) in WAL mode makes a commit durable against a process
// crash; FULL also against power loss, at one fsync per commit.
const (
	SyncNormal = "NORMAL"
	SyncFull   = "FULL"
)

// Defaults of Options.
const (
	DefaultBusyTimeout = 5 * time.Second
	// MaxBusyTimeout is the longest busy timeout SQLite takes: it reads the milliseconds as a
	// 32-bit int, and a larger value would not wait at all.
	MaxBusyTimeout      = math.MaxInt32 * time.Millisecond
	DefaultMaxBodyBytes = 256 << 10
	// MaxMaxBodyBytes bounds MaxBodyBytes: the most the edge relays (its MAX_BODY_BYTES), and far
	// below SQLite's largest value (10^9 bytes), past which an emit failed with a 500.
	MaxMaxBodyBytes   = 100 << 20
	DefaultBacklogCap = 100_000   // per subscriber
	DefaultGlobalCap  = 1_000_000 // all subscribers
	DefaultReaders    = 4
	// DefaultQueueFullRetry is the retry delay suggested when the global cap is reached.
	DefaultQueueFullRetry = 30 * time.Second
	// MaxBatchEvents bounds an EmitBatch (the API's batch of 1,000), and how many events one
	// group-commit transaction gathers.
	MaxBatchEvents = 1000
)

// Options configure Open. Zero fields take the defaults.
type Options struct {
	Path         string        // the database file; created if missing
	Synchronous  string        // SyncNormal (default) or SyncFull
	BusyTimeout  time.Duration // how long a writer waits for another process's write lock
	MaxBodyBytes int           // largest event body accepted
	BacklogCap   int64         // pending deliveries per subscriber before the oldest are dead-lettered
	GlobalCap    int64         // pending + in-flight deliveries before Emit, RetryDelivery and ReplayDead fail with ErrQueueFull
	Readers      int           // size of the read-only connection pool
	// Now is the clock; nil means time.Now. Tests inject a settable one.
	Now func() time.Time

	// 0: the constants; tests lower them.
	walRestartFrames int
	checkpointEvery  time.Duration
}

func (o *Options) setDefaults() error {
	if o.Path == "" {
		return fieldErrf("path", "the database path is required")
	}
	if strings.ContainsAny(o.Path, "?#") {
		return fieldErrf("path", "%q: '?' and '#' are not allowed in the database path", o.Path)
	}
	switch strings.ToUpper(o.Synchronous) {
	case "":
		o.Synchronous = SyncNormal
	case SyncNormal, SyncFull:
		o.Synchronous = strings.ToUpper(o.Synchronous)
	default:
		return fieldErrf("synchronous", "%q must be NORMAL or FULL", o.Synchronous)
	}
	for _, f := range []struct {
		name string
		neg  bool
	}{
		{"busy_timeout", o.BusyTimeout < 0}, {"max_body_bytes", o.MaxBodyBytes < 0},
		{"backlog_cap", o.BacklogCap < 0}, {"global_cap", o.GlobalCap < 0}, {"readers", o.Readers < 0},
	} {
		if f.neg {
			return fieldErrf(f.name, "must not be negative")
		}
	}
	if o.BusyTimeout > MaxBusyTimeout {
		return fieldErrf("busy_timeout", "%s is above the maximum of %s", o.BusyTimeout, MaxBusyTimeout)
	}
	if o.MaxBodyBytes > MaxMaxBodyBytes {
		return fieldErrf("max_body_bytes", "%d is above the maximum of %d", o.MaxBodyBytes, MaxMaxBodyBytes)
	}
	if o.BusyTimeout == 0 {
		o.BusyTimeout = DefaultBusyTimeout
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.BacklogCap == 0 {
		o.BacklogCap = DefaultBacklogCap
	}
	if o.GlobalCap == 0 {
		o.GlobalCap = DefaultGlobalCap
	}
	if o.Readers == 0 {
		o.Readers = DefaultReaders
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.walRestartFrames == 0 {
		o.walRestartFrames = walRestartFrames
	}
	if o.checkpointEvery == 0 {
		o.checkpointEvery = checkpointEvery
	}
	return nil
}

// Store is an open database. It is safe for concurrent use.
type Store struct {
	opts Options
	// w is the only connection that writes. SQLite allows one writer at a time per file; with a pool
	// of writers, each would take the lock in turn and the others would spin in busy_timeout, and a
	// deferred transaction that upgrades from read to write can fail with SQLITE_BUSY no matter the
	// timeout. One connection (MaxOpenConns 1) with BEGIN IMMEDIATE serialises this process's writes
	// in Go, where waiting is cheap and fair, and leaves busy_timeout to arbitrate between processes.
	w *sql.DB
	// r is a pool of read-only connections: WAL lets them read while the writer writes.
	r *sql.DB
	// ckpt is checkpointLoop's connection; wrote signals it that a transaction committed.
	ckpt     *sql.DB
	wrote    chan struct{}
	ckptDone chan struct{}

	storeID string // random, from meta: prefixes delivery ids

	emits    chan *emitReq // to the group committer
	wake     chan struct{} // signalled after each emit commit (engine wake-up)
	stop     chan struct{}
	done     chan struct{}
	closeMu  sync.Once
	closeErr error

	// stmts are statements prepared on w, by text; wanted are texts to prepare (see prepared).
	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt
	wanted map[string]bool

	subsMu   sync.Mutex
	subsVer  string        // meta subscribers_version the cache was loaded at
	subsList []*Subscriber // cache of non-disabled subscribers for emit matching

	fanoutIDs fanoutIDs

	counters  Counters
	rescuedAt atomic.Int64 // claim time (unix ms) of the last look for expired leases
	trimmedAt atomic.Int64 // settle time (unix s) of the last trim of delivered_by_second
	commits   atomic.Int64 // group-commit transactions, for tests
	enqueued  atomic.Int64 // emit requests handed to the committer, for tests
}

// Open opens (creating if needed) the database at opts.Path, applies pending migrations and starts
// the group committer. Close releases it.
func Open(ctx context.Context, opts Options) (*Store, error) {
	return openVersion(ctx, opts, 0)
}

// createPrivate creates the database file, if it is new, readable by its owner only: it holds
// every subscriber's signing secret, and SQLite gives its -wal and -shm files the database file's
// mode. An existing file keeps the mode its operator chose.
func createPrivate(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	// Not O_EXCL, which refuses a symbolic link to a file not there yet: SQLite then created the
	// file through the link with the umask's mode. Read-only: a file another process made since
	// the Stat may be read-only to this one.
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// openVersion is Open migrating to the given schema version (0: the latest); tests build older
// databases with it.
func openVersion(ctx context.Context, opts Options, version int) (*Store, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	dsn := func(extra string) string {
		q := url.Values{}
		q.Add("_pragma", "busy_timeout("+strconv.FormatInt(opts.BusyTimeout.Milliseconds(), 10)+")")
		// Foreign keys are not enforced: every delivery insert looked up its event and its
		// subscriber, every attempt insert its delivery, parents the same transaction had just
		// written or read (about −20 % CPU per emitted event; settling and claiming within noise).
		// The store deletes children itself instead of ON DELETE CASCADE (DeleteSubscriber, and
		// a trigger for a delivery's attempts, migration 0008) and logs attempts only for
		// deliveries its settle updated. The schema keeps its REFERENCES clauses: they document
		// the relations, and PRAGMA foreign_key_check (the tests') checks them.
		q.Add("_pragma", "foreign_keys(0)")
		q.Add("_pragma", "synchronous("+opts.Synchronous+")")
		// Statement journals (pages a statement may have to undo) stay in memory: on disk, every
		// multi-row INSERT or UPDATE wrote its pages to a temporary file first.
		q.Add("_pragma", "temp_store(MEMORY)")
		// SQLite decodes %HH in a URI's path: a '%' of the file's name is written %25.
		return "file:" + strings.ReplaceAll(opts.Path, "%", "%25") + "?" + q.Encode() + extra
	}
	if err := createPrivate(opts.Path); err != nil {
		return nil, fmt.Errorf("open %s: %w", opts.Path, err)
	}
	// The file is checked before the writer opens it: the writer's DSN switches it to WAL, which
	// would change a file that Open then refuses.
	if err := waitBusy(ctx, opts.BusyTimeout, func() error { return checkFile(ctx, dsn("&_pragma=query_only(1)")) }); err != nil {
		return nil, fmt.Errorf("open %s: %w", opts.Path, err)
	}
	// The writer does not checkpoint: checkpointLoop does, from its own connection.
	w, err := sql.Open("sqlite", dsn("&_pragma=journal_mode(WAL)&_pragma=wal_autocheckpoint(0)&_txlock=immediate"))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", opts.Path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	s := &Store{opts: opts, w: w, emits: make(chan *emitReq, MaxBatchEvents), wake: make(chan struct{}, 1),
		wrote: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), ckptDone: make(chan struct{}),
		stmts: map[string]*sql.Stmt{}, wanted: map[string]bool{}, fanoutIDs: fanoutIDs{byKey: map[string]int64{}}}
	if err := waitBusy(ctx, opts.BusyTimeout, func() error { return s.migrate(ctx, version) }); err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s: %w", opts.Path, err)
	}
	r, err := sql.Open("sqlite", dsn("&_pragma=query_only(1)"))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s: %w", opts.Path, err)
	}
	r.SetMaxOpenConns(opts.Readers)
	r.SetMaxIdleConns(opts.Readers)
	s.r = r
	if s.ckpt, err = sql.Open("sqlite", dsn("")); err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("open %s: %w", opts.Path, err)
	}
	s.ckpt.SetMaxOpenConns(1)
	if err := s.w.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'store_id'`).Scan(&s.storeID); err != nil {
		s.w.Close()
		r.Close()
		s.ckpt.Close()
		return nil, fmt.Errorf("read store id: %w", err)
	}
	go s.commitLoop()
	go s.checkpointLoop()
	return s, nil
}

// waitBusy runs fn, a connection's first use (checkFile, migrate), again while it fails with
// SQLITE_BUSY, until timeout has passed. On a file another process is creating, the writer's
// switch to WAL (a pragma of the DSN) failed at once, without the busy handler (three processes
// opening one new file at once: a few rounds in 40), and a fresh install whose first cron drain
// and first `edgehook emit` started together lost one of them to "database is locked". A failed
// connection is discarded, so the next try opens another.
func waitBusy(ctx context.Context, timeout time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil || ResultCode(err) != CodeBusy || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// checkpointEvery paces checkpointLoop while writes go on.
const checkpointEvery = 250 * time.Millisecond

// walRestartFrames is how long (in pages) the WAL may grow before checkpointLoop holds this
// process's writes for a moment to let it restart (see restartWAL): about 16 MB.
const walRestartFrames = 4096

// checkpointLoop copies committed pages from the WAL back into the database file, from its own
// connection, at most every checkpointEvery while transactions commit. A passive checkpoint runs
// beside the writer without blocking it, on the other core; SQLite's own rule (a checkpoint once
// the WAL holds 1,000 pages) ran it inside whichever commit crossed the mark: an emit or a claim
// then took several milliseconds more (and longer stalls behind it). Durability is the WAL's, at
// commit, either way. Other processes on the file keep SQLite's rule.
func (s *Store) checkpointLoop() {
	defer close(s.ckptDone)
	for {
		select {
		case <-s.stop:
			return
		case <-s.wrote:
		}
		// An error (busy, I/O) is left to the next round, or to the checkpoint at Close.
		var busy, frames, copied int
		if s.ckpt.QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied) == nil && frames >= s.opts.walRestartFrames {
			s.restartWAL()
		}
		select {
		case <-s.stop:
			return
		case <-time.After(s.opts.checkpointEvery):
		}
	}
}

// restartWAL checkpoints what the last checkpoint could not copy, on the writer's connection, so
// no write of this process adds to the WAL meanwhile. The WAL starts again from its beginning only
// when a write transaction begins with every page copied back, which a checkpoint running beside
// a busy writer never sees: under sustained writes the WAL grew without bound (107 MB for 72 MB of
// database after 60,000 emits). The pages left are those written during the last checkpoint, so
// the writer waits for a short copy and the database file's sync.
func (s *Store) restartWAL() {
	ctx := context.Background()
	conn, err := s.w.Conn(ctx) // waits for the writer's one connection
	if err != nil {
		return
	}
	defer conn.Close() // back to the writer's pool
	conn.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`)
}

// Close stops the group committer (emits already queued are committed) and closes the database.
func (s *Store) Close() error {
	s.closeMu.Do(func() {
		close(s.stop)
		<-s.done
		<-s.ckptDone
		errs := []error{s.r.Close(), s.ckpt.Close()}
		s.stmtMu.Lock()
		for _, st := range s.stmts {
			errs = append(errs, st.Close())
		}
		s.stmts = nil // prepareWanted closes what it prepares after this
		s.stmtMu.Unlock()
		s.closeErr = errors.Join(append(errs, s.w.Close())...)
	})
	return s.closeErr
}

// Now returns the store's clock reading.
func (s *Store) Now() time.Time { return s.opts.Now() }

// Wake is signalled (without blocking, coalesced) after every emit that created deliveries for
// active subscribers, so an engine in the same process can claim at once instead of waiting for
// its next poll.
func (s *Store) Wake() <-chan struct{} { return s.wake }

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migrate applies the embedded migrations that the database has not seen, each in its own
// transaction, recording the version in PRAGMA user_version. Open calls it; it is exported for
// `edgehook migrate`. It returns an error if the database is newer than this binary.
func (s *Store) Migrate(ctx context.Context) error { return s.migrate(ctx, 0) }

// migrations returns the names of the embedded migrations, in order.
func migrations() ([]string, error) {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	sort.Strings(names)
	return names, err
}

// checkFile runs checkVersion on its own connection to dsn, which must only read: a file refused
// is then left as it was.
func checkFile(ctx context.Context, dsn string) error {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = checkVersion(ctx, db)
	return err
}

// checkVersion returns the database's schema version, or an error if edgehook must not use the
// file: its schema is newer than this binary's, or it is another application's
// (ErrForeignDatabase). One statement reads it all: between two, another process's first
// migration could commit, and the file look like one with tables but no version.
func checkVersion(ctx context.Context, q queryRower) (int, error) {
	names, err := migrations()
	if err != nil {
		return 0, err
	}
	var current, meta int
	var other sql.NullString
	err = q.QueryRowContext(ctx, `SELECT user_version,
		(SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'),
		(SELECT min(name) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%')
		FROM pragma_user_version`).Scan(&current, &meta, &other)
	switch {
	case err != nil:
		return 0, fmt.Errorf("read version: %w", err)
	case current > len(names):
		return 0, fmt.Errorf("database schema version %d is newer than this binary's %d: run the newer edgehook, or restore a backup made before the upgrade", current, len(names))
	case current == 0 && other.Valid:
		// A mistyped --db naming another application's file must not have edgehook's tables added.
		return 0, fmt.Errorf("%w: it has no schema version but holds other things (%q, ...)", ErrForeignDatabase, other.String)
	case current > 0 && meta == 0:
		return 0, fmt.Errorf("%w: its schema version is %d but it has no edgehook tables", ErrForeignDatabase, current)
	}
	return current, nil
}

// migrate applies the migrations up to version (0: all).
func (s *Store) migrate(ctx context.Context, version int) error {
	names, err := migrations()
	if err != nil {
		return err
	}
	if version > 0 {
		names = names[:version]
	}
	current, err := checkVersion(ctx, s.w)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for i := current; i < len(names); i++ {
		body, err := migrationFS.ReadFile(names[i])
		if err != nil {
			return err
		}
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			// Re-check inside the write lock: another process may have migrated (or written)
			// meanwhile.
			v, err := checkVersion(ctx, tx)
			if err != nil || v != i {
				return err
			}
			if _, err := tx.ExecContext(ctx, string(body)); err != nil {
				return err
			}
			if i == 0 {
				if _, err := tx.ExecContext(ctx, `INSERT INTO meta(key, value) VALUES ('store_id', ?), ('subscribers_version', '0')`, randomHex(4)); err != nil {
					return err
				}
			}
			_, err = tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, i+1))
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate: %s: %w", names[i], err)
		}
	}
	return nil
}

// ErrForeignDatabase: the file is an SQLite database of something else (a mistyped --db); edgehook
// leaves it alone.
var ErrForeignDatabase = errors.New("not an edgehook database")

// queryRower is a *sql.DB or a *sql.Tx.
type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Ping checks that the database answers and can take a write lock (for /readyz): it runs an empty
// write transaction on the writer connection.
func (s *Store) Ping(ctx context.Context) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE meta SET value = value WHERE key = 'store_id'`)
		return err
	})
}

// inTx runs fn in a write transaction (BEGIN IMMEDIATE) and commits it.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	defer s.prepareWanted(ctx)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	select {
	case s.wrote <- struct{}{}:
	default:
	}
	return nil
}

// The hot paths (emit, claim, settle) run their statements through exec, query and queryRow.
// Since modernc.org/sqlite v1.41 a database/sql prepared statement keeps its compiled program,
// while tx.ExecContext(q) compiles q again on every call (a good part of a claim's CPU). Preparing
// needs the writer's one connection, which the transaction holds, so the first use of a text runs
// it unprepared and asks for it; inTx prepares what was asked once the transaction is over. Only
// texts from a bounded set may go through here: the cache is never trimmed.

// prepared returns q's statement for tx, or nil (then asking for it).
func (s *Store) prepared(ctx context.Context, tx *sql.Tx, q string) *sql.Stmt {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	st, ok := s.stmts[q]
	if !ok {
		s.wanted[q] = true
		return nil
	}
	return tx.StmtContext(ctx, st)
}

// prepareWanted prepares the statements asked for. A failure is left to the next use, which
// runs the text unprepared and reports the error if it is the statement's own. The lock is not
// held while preparing: a transaction holding the connection may be waiting for it.
func (s *Store) prepareWanted(ctx context.Context) {
	s.stmtMu.Lock()
	var todo []string
	for q := range s.wanted {
		todo = append(todo, q)
		delete(s.wanted, q)
	}
	s.stmtMu.Unlock()
	for _, q := range todo {
		st, err := s.w.PrepareContext(ctx, q)
		if err != nil {
			continue
		}
		s.stmtMu.Lock()
		if _, dup := s.stmts[q]; dup || s.stmts == nil {
			st.Close()
		} else {
			s.stmts[q] = st
		}
		s.stmtMu.Unlock()
	}
}

func (s *Store) exec(ctx context.Context, tx *sql.Tx, q string, args ...any) (sql.Result, error) {
	if st := s.prepared(ctx, tx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, q, args...)
}

func (s *Store) query(ctx context.Context, tx *sql.Tx, q string, args ...any) (*sql.Rows, error) {
	if st := s.prepared(ctx, tx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return tx.QueryContext(ctx, q, args...)
}

func (s *Store) queryRow(ctx context.Context, tx *sql.Tx, q string, args ...any) *sql.Row {
	if st := s.prepared(ctx, tx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return tx.QueryRowContext(ctx, q, args...)
}

// RenewStoreID gives the database a new random store id and returns it: every delivery id
// handed out from then on differs from every one before. It is for a restored backup, which
// would otherwise hand out again the delivery ids given after the backup was taken, ids the edge
// may hold as delivered and answer "duplicate" without forwarding (deploy.md). The ids of the
// deliveries already stored change too; lookups by their old ids find nothing. This Store keeps
// the id it was opened with, as does any other process that has the file open: stop them first.
func (s *Store) RenewStoreID(ctx context.Context) (string, error) {
	id := randomHex(4)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'store_id'`, id)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("renew store id: %w", err)
	}
	return id, nil
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand since Go 1.24)
	return hex.EncodeToString(b)
}

// ms converts a time to the stored unix milliseconds; the zero time is 0.
func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// msBound is t in unix ms rounded up, for a bound of a range of stored times (whole ms): rounded
// down, a from or to a fraction of a millisecond after a stored time would take it in, or leave it
// out, against [from, to).
func msBound(t time.Time) int64 {
	m := ms(t)
	if t.After(time.UnixMilli(m)) {
		m++
	}
	return m
}

// fromMS converts stored unix milliseconds back; 0 is the zero time.
func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// Counters are cumulative in-process counts of things the store decides on its own (at emit, and
// for a delivery in flight superseded meanwhile, when it comes back), for the engine's metrics.
type Counters struct {
	mu              sync.Mutex
	superseded      int64
	backlogOverflow int64
}

// CounterValues is a snapshot of Counters.
type CounterValues struct {
	Superseded      int64 // deliveries superseded by a newer event with the same coalesce key
	BacklogOverflow int64 // pending deliveries dead-lettered by the per-subscriber backlog cap
}

// Counters returns the cumulative counts since Open.
func (s *Store) Counters() CounterValues {
	s.counters.mu.Lock()
	defer s.counters.mu.Unlock()
	return CounterValues{Superseded: s.counters.superseded, BacklogOverflow: s.counters.backlogOverflow}
}

func (c *Counters) add(superseded, overflow int64) {
	c.mu.Lock()
	c.superseded += superseded
	c.backlogOverflow += overflow
	c.mu.Unlock()
}
