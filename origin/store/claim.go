package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
)

// ClaimParams bound one claim.
type ClaimParams struct {
	Now           time.Time
	Limit         int           // deliveries at most
	LeaseDuration time.Duration // how long the claimer owns them
	// MaxBytes, when positive, bounds the event body bytes the claimer holds: HeldBytes, those it
	// holds already, plus the body of every delivery claimed (each one counts its event's body).
	// The claim stops at the first due delivery that would pass it, leaving that one and the rest
	// pending, untouched; but a claimer that holds nothing takes its first delivery whatever its
	// size, so a body larger than the whole budget is still sent, alone.
	MaxBytes, HeldBytes int64
}

// Claimed is a leased delivery with everything needed to send it.
type Claimed struct {
	Seq          int64 // internal row id, for Settle
	DeliveryID   string
	LeaseToken   string
	Attempts     int       // attempts made before this one
	AgeFrom      time.Time // max age counts from here: age_from, or its subscriber's resume if later
	CoalesceKey  string
	Event        Event
	Subscriber   *Subscriber // shared snapshot: do not modify
	Probe        bool        // the circuit breaker's single probe
	LeaseExpires time.Time
}

// ClaimResult is what Claim took, and whether due work was left behind by the rate limits.
type ClaimResult struct {
	Deliveries []Claimed
	// Waiting is true when some active subscriber has due deliveries that its token bucket or
	// in-flight cap kept back: a drain "until idle" is not idle yet.
	Waiting bool
	// NextToken, when not zero, is how soon the token bucket of such a subscriber has its next
	// token: claiming again then keeps the rate precise without polling fast.
	NextToken time.Duration
	// WantBytes, when positive, is the body size of the due delivery at which ClaimParams.MaxBytes
	// stopped the claim: claiming again is worth it once that many bytes are free, or none are
	// held.
	WantBytes int64

	superseded int64 // deliveries whose expired lease ended superseded (rescueExpired)
}

// candidate is a subscriber that may be claimed for, with its budget.
type candidate struct {
	id        string
	ordinal   int64
	cursor    int64 // limiter.cursor (fanout.go)
	budget    int
	tokens    float64
	rate      float64
	behind    float64 // seconds until now reaches the bucket's last refill, which refills nothing before
	probe     bool
	taken     int
	exhausted bool
	byTokens  bool  // the budget is the bucket's, not the in-flight cap's
	resumedAt int64 // ms, its last resume from a pause or a disable (migration 0016)
}

// maxTokenWait bounds ClaimResult.NextToken: the engine claims again at its poll interval anyway.
const maxTokenWait = time.Hour

// held notes that c has due work it could not take, and when its bucket has the next token.
func (c *candidate) held(res *ClaimResult) {
	res.Waiting = true
	if !c.byTokens || c.rate <= 0 {
		return
	}
	// In float seconds, bounded before the conversion: a bucket slow enough (a rate of 1e-10/s)
	// overflowed a Duration into a negative one, which the floor made a millisecond.
	secs := min(c.behind+(1-(c.tokens-float64(c.taken)))/c.rate, maxTokenWait.Seconds())
	wait := max(time.Duration(secs*float64(time.Second)), time.Millisecond)
	if res.NextToken == 0 || wait < res.NextToken {
		res.NextToken = wait
	}
}

// Claim leases up to p.Limit due deliveries in one write transaction:
//
//   - Leases that expired (a crashed or stuck engine) are returned to the queue first (held if
//     their subscriber was disabled meanwhile), by the first claim in each rescueInterval of claim
//     time.
//   - Subscribers are served round robin (least recently claimed first), each at most its fair
//     share of the limit in a first pass, so a subscriber with 100,000 due deliveries cannot delay
//     one with 1; a second pass hands the unused share to those that had more.
//   - A subscriber's take is bounded by its token bucket (lazily refilled at rate, clamped at
//     burst, spent here so every process shares it), its in-flight cap, a Retry-After pause, and
//     the circuit breaker (open: nothing; cool-down over: one probe). One with deliveries in
//     flight is taken for once half its cap is free, or its bucket is what limits it.
//   - First attempts are taken before retries: those with a row (coalesced, released or resumed)
//     and those of the subscriber's fanouts, oldest event first.
//   - With p.MaxBytes, the claim stops at the first delivery whose event body does not fit in
//     what is left of it (byteBudget.take).
//
// The due deliveries are found first (SELECT … LIMIT n per subscriber and kind, with their body
// lengths), then the rows taken are leased with one UPDATE … RETURNING statement stamping a random
// lease token and the expiry, and each subscriber's fanout deliveries as one range of events under
// that token, without rows (leaseFanouts). Settle checks the token.
func (s *Store) Claim(ctx context.Context, p ClaimParams) (ClaimResult, error) {
	c, err := s.newClaim(p)
	if err != nil {
		return ClaimResult{}, err
	}
	var res ClaimResult
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		res, err = s.claimTx(ctx, tx, c, countDeltas{})
		return err
	})
	if err != nil {
		return ClaimResult{}, err
	}
	s.claimed(c)
	s.counters.add(res.superseded, 0)
	return res, nil
}

// claimPlan is one claim's parameters, as its transaction uses them.
type claimPlan struct {
	limit           int
	now, leaseUntil int64 // ms
	token           string
	rescue          bool // look for expired leases first
	bytes           byteBudget
}

// byteBudget is what a claim may still take of ClaimParams.MaxBytes.
type byteBudget struct {
	bounded bool
	left    int64
	alone   bool  // the claimer holds nothing yet: the next delivery is taken whatever its size
	want    int64 // the body that did not fit (ClaimResult.WantBytes); the claim takes nothing more
}

// take counts a delivery whose body is n bytes long, if it fits; nil is no bound. Once one did not
// fit none does, whatever its size: the claim takes the deliveries subscriber by subscriber in the
// round robin's order and stops there. Skipping it for smaller ones could pass over a large body
// for good while they kept bytes held; stopping, its subscriber comes first once those ahead of it
// have claimed (they go behind it), and from then on the claims take nothing until it fits.
func (b *byteBudget) take(n int64) bool {
	switch {
	case b == nil || !b.bounded:
		return true
	case b.want > 0:
		return false
	case n > b.left && !b.alone:
		b.want = max(n, 1)
		return false
	}
	b.left, b.alone = b.left-n, false
	return true
}

// newClaim checks p and prepares a claim; rescue says whether this one looks for expired leases.
func (s *Store) newClaim(p ClaimParams) (claimPlan, error) {
	if p.Limit <= 0 || p.LeaseDuration <= 0 {
		return claimPlan{}, fmt.Errorf("claim: limit %d and lease %s must be positive", p.Limit, p.LeaseDuration)
	}
	now := ms(p.Now)
	last := s.rescuedAt.Load()
	return claimPlan{limit: p.Limit, now: now, leaseUntil: ms(p.Now.Add(p.LeaseDuration)), token: randomHex(16),
		rescue: last == 0 || now < last || now-last >= rescueInterval.Milliseconds(),
		bytes:  byteBudget{bounded: p.MaxBytes > 0, left: p.MaxBytes - p.HeldBytes, alone: p.HeldBytes <= 0}}, nil
}

// claimed records, once a claim's transaction committed, that it looked for expired leases.
func (s *Store) claimed(c claimPlan) {
	if c.rescue {
		s.rescuedAt.Store(c.now)
	}
}

// claimTx runs a claim in tx (see Claim), and writes moves, the count changes of the transaction
// not yet in queue_counts (a settle's), with its own in one statement. The candidates are read
// from queue_counts: moves into pending are written first (a released delivery is due at once),
// moves out of leased are taken off the in-flight counts read.
func (s *Store) claimTx(ctx context.Context, tx *sql.Tx, cl claimPlan, moves countDeltas) (ClaimResult, error) {
	var res ClaimResult
	if cl.rescue {
		var err error
		if res.superseded, err = s.rescueExpired(ctx, tx, cl.now); err != nil {
			return res, fmt.Errorf("claim: rescue expired leases: %w", err)
		}
		if _, err := s.exec(ctx, tx, rebaseBucketsSQL, cl.now, clockSlack.Milliseconds()); err != nil {
			return res, fmt.Errorf("claim: %w", err)
		}
	}
	if moves.into(StatusPending) {
		if err := moves.write(ctx, s, tx); err != nil {
			return res, err
		}
		clear(moves)
	}
	cands, err := s.claimCandidates(ctx, tx, cl.now, moves)
	if err != nil {
		return res, err
	}
	// The first pass shares the limit among the candidates that can take anything: counting those
	// at their cap or out of tokens too gave the others a share too small, and a second pass (its
	// searches and insert again) in most claims of a drain, where a settle frees places of a few
	// subscribers only.
	able := 0
	for _, c := range cands {
		if c.budget > 0 {
			able++
		}
	}
	remaining := cl.limit
	var rows []claimedRow
	for pass := 0; pass < 2 && remaining > 0 && cl.bytes.want == 0; pass++ {
		share := remaining
		if pass == 0 {
			share = max(1, cl.limit/max(1, able))
		}
		var asks []claimAsk
		left := remaining
		for _, c := range cands {
			if want := min(c.budget-c.taken, share, left); !c.exhausted && want > 0 {
				asks = append(asks, claimAsk{c: c, n: want})
				left -= want
			}
		}
		got, err := s.claimBatch(ctx, tx, asks, cl.now, cl.leaseUntil, cl.token, &cl.bytes)
		if err != nil {
			return res, err
		}
		rows = append(rows, got...)
		for _, a := range asks {
			a.c.taken += a.got
			remaining -= a.got
			a.c.exhausted = a.got < a.n
		}
	}
	res.WantBytes = cl.bytes.want
	var spent []spend
	for _, c := range cands {
		if c.taken == 0 {
			if c.budget == 0 && (c.byTokens || !res.Waiting) {
				due, err := s.hasDue(ctx, tx, c, cl.now)
				if err != nil {
					return res, err
				}
				if due {
					c.held(&res)
				}
			}
			continue
		}
		if !c.exhausted && c.taken == c.budget {
			c.held(&res) // limited, maybe more due
		}
		spent = append(spent, spend{ID: c.id, Tokens: c.tokens - float64(c.taken), Probe: c.probe, Cursor: c.cursor})
	}
	for _, r := range rows {
		moves.move(r.subID, StatusPending, StatusLeased, 1)
	}
	if err := moves.write(ctx, s, tx); err != nil || len(rows) == 0 {
		return res, err
	}
	if err := s.spendTokens(ctx, tx, spent, cl.now, cl.leaseUntil); err != nil {
		return res, err
	}
	subs, err := s.matchingSubscribers(ctx, tx)
	if err != nil {
		return res, err
	}
	res.Deliveries, err = s.completeClaims(ctx, tx, rows, subs, cands, cl.token, cl.leaseUntil)
	return res, err
}

// rescueInterval is how often (in claim time) a claim first looks for expired leases (and at the
// buckets' clocks): the look reads every leased delivery, thousands when the engine has many in
// flight, and a lease is at least a second long.
const rescueInterval = time.Second

// clockSlack is how much older than a bucket's last refill a claim's clock reading may be and
// still be a claim that read the clock and then waited for the write lock, which refills nothing
// (spendTokens). Older, the clock was set back: rebaseBucketsSQL makes such buckets refill from
// the new reading on, or they would refill nothing, and their subscribers get nothing, until the
// clock had caught up with the old readings again. The round robin's last claim times likewise:
// those claimed since the clock went back would otherwise always come first. A clock set back
// also delays by as much the deadlines stored as times: backoffs, Retry-After pauses, circuit
// cool-downs, leases.
const clockSlack = time.Minute

// rebaseBucketsSQL moves to now (?1) the refill times more than ?2 ms after it, and puts the last
// claim times past that first in the round robin (0, as never claimed): a scan of the limiter
// rows, one per subscriber, by the claims that look for expired leases (a claim whose reading is
// older than the last one's always does: newClaim).
const rebaseBucketsSQL = `UPDATE limiter SET refilled_at = CASE WHEN refilled_at > ?1 + ?2 THEN ?1 ELSE refilled_at END,
	last_claim_at = CASE WHEN last_claim_at > ?1 + ?2 THEN 0 ELSE last_claim_at END
	WHERE refilled_at > ?1 + ?2 OR last_claim_at > ?1 + ?2`

// rescueExpired returns deliveries whose lease expired (their engine crashed or hung) to the queue
// as a release would (pending, held if their subscriber was disabled meanwhile, superseded if a
// newer event with their coalesce key was emitted): rows leased, and the deliveries of expired
// ranges (migration 0011), which get their rows here. It counts them (before the candidates are
// read from the counts), and returns how many it superseded. It looks before it writes: nearly
// always nothing has expired.
func (s *Store) rescueExpired(ctx context.Context, tx *sql.Tx, now int64) (superseded int64, err error) {
	var expired bool
	if err := s.queryRow(ctx, tx, `SELECT EXISTS (SELECT 1 FROM deliveries WHERE `+expiredSQL+`)
		OR EXISTS (SELECT 1 FROM leases WHERE expires_at <= ?1)`, now).Scan(&expired); err != nil || !expired {
		return 0, err
	}
	c := countDeltas{}
	for _, q := range rescueSQL {
		if err := s.rescue(ctx, tx, q, now, c); err != nil {
			return 0, err
		}
	}
	if _, err := s.exec(ctx, tx, `DELETE FROM leases WHERE expires_at <= ?`, now); err != nil {
		return 0, err
	}
	return c.total(StatusSuperseded), c.write(ctx, s, tx)
}

// rescueSQL returns the deliveries of leases expired at ?1 to the queue, returning their
// subscribers and new statuses: the rows leased, then the leased ranges' deliveries without one
// (fanout deliveries, which no newer event supersedes).
var rescueSQL = [...]string{
	`UPDATE deliveries SET status = ` + returnedStatus + `, reason = ` + returnedReason + `, lease_token = '', lease_expires_at = 0,
		updated_at = ?1 WHERE ` + expiredSQL + ` RETURNING subscriber_id, status`,
	`INSERT INTO deliveries(seq, event_seq, subscriber_id, status, reason, next_attempt_at, age_from, created_at, updated_at)
		SELECT d.seq, d.event_seq, d.subscriber_id, ` + unsentStatusOf("d.subscriber_id") + `, ` + heldReasonOf("d.subscriber_id") + `,
			d.next_attempt_at, d.age_from, d.created_at, ?1
		FROM leased_deliveries d WHERE d.lease_expires_at <= ?1
		RETURNING subscriber_id, status`,
}

// rescue runs one of rescueSQL and counts what it returned to the queue in c.
func (s *Store) rescue(ctx context.Context, tx *sql.Tx, q string, now int64, c countDeltas) error {
	rows, err := s.query(ctx, tx, q, now)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var sub string
		var status Status
		if err := rows.Scan(&sub, &status); err != nil {
			return err
		}
		c.move(sub, StatusLeased, status, 1)
	}
	return rows.Err()
}

// expiredSQL selects the leases expired at ?1, through deliveries_leased (whose condition it
// repeats for the planner).
const expiredSQL = `status = 'leased' AND lease_expires_at <= ?1`

// spend is a subscriber's bucket and cursor after a claim took from it.
type spend struct {
	ID     string
	Tokens float64
	Probe  bool  // the claim took the circuit's probe
	Cursor int64 // past the fanout deliveries it took
}

// spendTokens writes the buckets and cursors of the subscribers a claim took from, in one
// statement: the refill is accounted up to now, a probe marks the circuit as probing until the
// lease ends.
// refilled_at never goes back: a process whose clock reading is older than another's last claim
// (it read the clock, then waited for the write lock) must not be credited that time twice.
func (s *Store) spendTokens(ctx context.Context, tx *sql.Tx, spent []spend, now, leaseUntil int64) error {
	args := make([]any, 0, 2+3*len(spent))
	return padded(len(spent), func(k, lo, hi int) error {
		args = append(args[:0], now, leaseUntil)
		for _, sp := range spent[lo:hi] {
			args = append(args, sp.ID, sp.Tokens, sp.Probe, sp.Cursor)
		}
		_, err := s.exec(ctx, tx, spendTokensSQL[k], padNulls(args, k, hi-lo, 4)...)
		return err
	})
}

// spendTokensSQL writes buckets: parameters now, the lease's end, then id, tokens, probe, cursor of
// each.
var spendTokensSQL = chunkSQL(4, func(values string) string {
	return `UPDATE limiter SET tokens = j.column2, refilled_at = max(limiter.refilled_at, t.now), last_claim_at = t.now,
			cursor = max(limiter.cursor, j.column4),
			circuit = CASE WHEN j.column3 THEN 'probing' ELSE limiter.circuit END,
			circuit_until = CASE WHEN j.column3 THEN t.lease ELSE limiter.circuit_until END
		FROM (SELECT ? AS now, ? AS lease) AS t, (` + values + `) AS j
		WHERE limiter.subscriber_id = j.column1`
})

// claimCandidates returns the active subscribers with pending deliveries that may send now, in
// round-robin order, with their budgets. moves are count changes not yet in queue_counts: none into
// pending, and those out of leased lower the in-flight counts.
func (s *Store) claimCandidates(ctx context.Context, tx *sql.Tx, now int64, moves countDeltas) ([]*candidate, error) {
	rows, err := s.query(ctx, tx, `SELECT s.id, s.ordinal, s.resumed_at, l.cursor, s.rate_per_sec, s.burst, s.max_in_flight, l.tokens, l.refilled_at, l.circuit,
			coalesce((SELECT n FROM queue_counts q WHERE q.subscriber_id = s.id AND q.status = 'leased'), 0)
		FROM subscribers s JOIN limiter l ON l.subscriber_id = s.id
		WHERE s.state = 'active' AND l.paused_until <= ?1
		  AND (l.circuit = 'closed' OR l.circuit_until <= ?1)
		  AND EXISTS (SELECT 1 FROM queue_counts q WHERE q.subscriber_id = s.id AND q.status = 'pending' AND q.n > 0)
		ORDER BY l.last_claim_at, s.id`, now)
	if err != nil {
		return nil, fmt.Errorf("claim: candidates: %w", err)
	}
	defer rows.Close()
	var cands []*candidate
	for rows.Next() {
		var (
			c                  candidate
			burst, maxInFlight int
			refilledAt, leased int64
			circuit            string
		)
		if err := rows.Scan(&c.id, &c.ordinal, &c.resumedAt, &c.cursor, &c.rate, &burst, &maxInFlight, &c.tokens, &refilledAt, &circuit, &leased); err != nil {
			return nil, err
		}
		leased += moves[[2]string{c.id, string(StatusLeased)}]
		elapsed := math.Max(0, float64(now-refilledAt)/1000)
		// A refill after now (a clock set back by less than clockSlack) earns nothing until now
		// reaches it: the next token is that much further off.
		c.behind = math.Max(0, float64(refilledAt-now)/1000)
		c.tokens = math.Min(float64(burst), c.tokens+c.rate*elapsed)
		c.budget = max(0, min(int(math.Floor(c.tokens)), maxInFlight-int(leased)))
		c.byTokens = int(math.Floor(c.tokens)) < maxInFlight-int(leased)
		// A subscriber with deliveries in flight is claimed for in chunks, once half its cap is
		// free (or what its bucket allows, if that is less): until then it is held as at its cap.
		// In a drain the answers come back interleaved across the subscribers, each settle freed a
		// place or two of every one, and every claim leased two or three deliveries for each,
		// paying a subscriber's searches, lease and bucket rows for so few (an in-process drain of
		// 12 subscribers, alternated runs: about 5 % less CPU per delivery this way). One with
		// nothing in flight is never held back: a quiet subscriber's deliveries wait for nothing.
		if !c.byTokens && HeldForInFlight(int(leased), maxInFlight) {
			c.budget = 0
		}
		if circuit != "closed" {
			// The circuit limits it now, not the bucket, unless that is empty: NextToken would
			// be a token already there (the floor of a negative wait: 1 ms), and the engine would
			// claim every millisecond while the previous probe is out.
			c.probe, c.byTokens = true, c.byTokens && c.tokens < 1
			c.budget = min(c.budget, 1)
			if leased > 0 { // the previous probe is still out
				c.budget = 0
			}
		}
		cands = append(cands, &c)
	}
	return cands, rows.Err()
}

// HeldForInFlight tells whether a claim takes none of a subscriber's deliveries for the n it has
// in flight, whatever its bucket: n is its cap, or it has less than half of its cap free (one
// with deliveries in flight is claimed for in chunks: claimCandidates). The engine waits for the
// settle that releases it by the same rule.
func HeldForInFlight(n, cap int) bool { return n >= cap || n > 0 && cap-n < cap/2 }

// claimedRow is what the claim statements return.
type claimedRow struct {
	seq, eventSeq, ageFrom int64
	attempts               int
	coalesceKey, subID     string
	bytes                  int64 // the event body's, read by fanoutFound only
}

// claimAsk is how many deliveries to lease for one candidate, and how many were.
type claimAsk struct {
	c      *candidate
	n, got int
}

// claimBatch leases, for every ask, up to n due deliveries of its subscriber: first attempts, its
// rows and its fanout deliveries oldest event first, then retries for what is still missing. It
// finds them all before it leases any, so that the byte budget takes them in one order
// (byteBudget.take): subscriber by subscriber as asked, each one's retries, then its first
// attempts. Up to claimChunk subscribers share one statement per kind (each statement is prepared:
// see Store.exec), so a claim runs a few statements, not one per subscriber.
func (s *Store) claimBatch(ctx context.Context, tx *sql.Tx, asks []claimAsk, now, leaseUntil int64, token string, bytes *byteBudget) ([]claimedRow, error) {
	firsts, err := s.dueRows(ctx, tx, "attempts = 0", asks, now, func(a claimAsk) int { return a.n })
	if err != nil {
		return nil, err
	}
	takes := make([]fanoutTake, len(asks))
	for i, a := range asks {
		takes[i] = fanoutTake{sub: a.c.id, ordinal: a.c.ordinal, cursor: a.c.cursor, n: int64(a.n)}
	}
	if err := s.liveFanouts(ctx, tx, takes); err != nil {
		return nil, err
	}
	fanned, err := s.fanoutFound(ctx, tx, takes)
	if err != nil {
		return nil, err
	}
	retries, err := s.dueRows(ctx, tx, "attempts > 0", asks, now, func(a claimAsk) int {
		return a.n - min(a.n, len(firsts[a.c.id])+len(fanned[a.c.id]))
	})
	if err != nil {
		return nil, err
	}
	var seqs []int64
	var fans []claimedRow
	for _, a := range asks {
		// Retries before first attempts: the query found them only for what the first attempts
		// left, so the order changes nothing unless the budget binds, and then a retry that did
		// not fit is not passed over for good by its own subscriber's new events (taken first,
		// they kept the bytes it waited for, or the claim holding nothing it needed to go alone).
		for _, r := range retries[a.c.id] {
			if !bytes.take(r.bytes) {
				break
			}
			seqs = append(seqs, r.seq)
		}
		picked, fan, _ := oldestFirst(firsts[a.c.id], fanned[a.c.id], int64(a.n), bytes)
		seqs, fans = append(seqs, picked...), append(fans, fanned[a.c.id][:fan]...)
	}
	out, err := s.leaseRows(ctx, tx, seqs, token, leaseUntil, now)
	if err != nil {
		return nil, err
	}
	// The cursors move with the buckets (spendTokens).
	if err := s.leaseFanouts(ctx, tx, takes, fans, token, leaseUntil, now); err != nil {
		return nil, err
	}
	bySub := make(map[string]*claimAsk, len(asks))
	for i := range asks {
		bySub[asks[i].c.id] = &asks[i]
	}
	for _, r := range fans {
		a := bySub[r.subID]
		a.c.cursor = max(a.c.cursor, r.eventSeq) // as moved: a second pass goes on from there
	}
	out = append(out, fans...)
	for _, r := range out {
		bySub[r.subID].got++
	}
	return out, nil
}

// leaseRowsSQL leases the pending rows of a JSON array of seqs: token, lease expiry, now, seqs.
const leaseRowsSQL = `UPDATE deliveries SET status = 'leased', lease_token = ?1, lease_expires_at = ?2, updated_at = ?3
	WHERE seq IN (SELECT value FROM json_each(?4)) AND status = 'pending'
	RETURNING seq, event_seq, attempts, coalesce_key, age_from, subscriber_id`

// claimChunk is the most subscribers one claim statement serves: it bounds the statement texts,
// each prepared once.
const claimChunk = 16

// leaseRows leases the pending rows of seqs and returns them.
func (s *Store) leaseRows(ctx context.Context, tx *sql.Tx, seqs []int64, token string, leaseUntil, now int64) ([]claimedRow, error) {
	if len(seqs) == 0 {
		return nil, nil
	}
	list, _ := json.Marshal(seqs)
	rows, err := s.query(ctx, tx, leaseRowsSQL, token, leaseUntil, now, string(list))
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	var out []claimedRow
	for rows.Next() {
		var r claimedRow
		if err := rows.Scan(&r.seq, &r.eventSeq, &r.attempts, &r.coalesceKey, &r.ageFrom, &r.subID); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// dueRow is a pending row that a claim or the backlog cap may take.
type dueRow struct {
	seq, eventSeq int64
	bytes         int64 // its event's body, read by claims only
}

// dueRows finds, for every ask with a positive limit, up to that many due rows of its subscriber
// of one kind ("attempts = 0": first attempts, "attempts > 0": retries), earliest due first, by
// subscriber: claimChunk subscribers a statement.
func (s *Store) dueRows(ctx context.Context, tx *sql.Tx, kind string, asks []claimAsk, now int64, limit func(claimAsk) int) (map[string][]dueRow, error) {
	out := map[string][]dueRow{}
	var args []any
	for i, a := range asks {
		if n := limit(a); n > 0 {
			args = append(args, a.c.id, now, n)
		}
		if len(args) == 0 || len(args) < 3*claimChunk && i < len(asks)-1 {
			continue
		}
		rows, err := s.query(ctx, tx, dueRowsSQL(kind, len(args)/3), args...)
		if err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		for rows.Next() {
			var sub string
			var r dueRow
			if err := rows.Scan(&sub, &r.seq, &r.eventSeq, &r.bytes); err != nil {
				rows.Close()
				return nil, err
			}
			out[sub] = append(out[sub], r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		args = args[:0]
	}
	return out, nil
}

// dueRowsSQL is a UNION ALL of n searches of one kind of due rows, each (subscriber id, now,
// limit), selecting the subscriber, seq, event seq and the length of the event's body (read from
// the row's header: octet_length does not load the body). The searches repeat the partial index's
// condition literally, and name the index, so each stays on the few due rows of its subscriber
// whatever the planner's statistics say. A limit is written (? + 0), not ?: SQLite's planner reads
// the value bound to a bare LIMIT ? and marks the statement to be compiled again whenever that
// parameter is bound anew, that is on every run (half of a claim's CPU went to recompiling).
func dueRowsSQL(kind string, n int) string {
	search := `SELECT d.subscriber_id, d.seq, d.event_seq, (SELECT octet_length(e.body) FROM events e WHERE e.seq = d.event_seq)
		FROM (SELECT subscriber_id, seq, event_seq FROM deliveries INDEXED BY ` + dueIndex(kind) + ` WHERE subscriber_id = ? AND status = 'pending' AND ` + kind + `
		AND next_attempt_at <= ? ORDER BY next_attempt_at LIMIT (? + 0)) AS d`
	searches := make([]string, n)
	for i := range searches {
		searches[i] = search
	}
	return strings.Join(searches, " UNION ALL ")
}

// dueIndex is the partial index of pending rows of one kind ("attempts = 0" or "attempts > 0").
func dueIndex(kind string) string {
	if kind == "attempts = 0" {
		return "deliveries_due_first"
	}
	return "deliveries_due_retry"
}

// hasDue reports whether a subscriber has a pending delivery due at now: a fanout delivery is due
// from its emit on.
func (s *Store) hasDue(ctx context.Context, tx *sql.Tx, c *candidate, now int64) (bool, error) {
	var due bool
	err := s.queryRow(ctx, tx, `SELECT `+hasFanoutSQL+`
		OR EXISTS (SELECT 1 FROM deliveries INDEXED BY deliveries_due_first WHERE subscriber_id = ?3 AND status = 'pending' AND attempts = 0 AND next_attempt_at <= ?4)
		OR EXISTS (SELECT 1 FROM deliveries INDEXED BY deliveries_due_retry WHERE subscriber_id = ?3 AND status = 'pending' AND attempts > 0 AND next_attempt_at <= ?4)`,
		c.ordinal, c.cursor, c.id, now).Scan(&due)
	return due, err
}

// completeClaims joins the claimed rows with their events and subscribers.
func (s *Store) completeClaims(ctx context.Context, tx *sql.Tx, rows []claimedRow, subs []*Subscriber, cands []*candidate, token string, leaseUntil int64) ([]Claimed, error) {
	bySub := make(map[string]*Subscriber, len(subs))
	for _, sub := range subs {
		bySub[sub.ID] = sub
	}
	byID := make(map[string]*candidate, len(cands))
	for _, c := range cands {
		byID[c.id] = c
	}
	events := map[int64]*Event{}
	seqs := make([]int64, 0, len(rows))
	for _, r := range rows {
		if _, ok := events[r.eventSeq]; !ok {
			events[r.eventSeq] = nil
			seqs = append(seqs, r.eventSeq)
		}
	}
	list, _ := json.Marshal(seqs)
	// One statement text for any number of events (a JSON array), so it is prepared once.
	q, err := s.query(ctx, tx, `SELECT seq, id, type, body, coalesce_key, created_at FROM events WHERE seq IN (SELECT value FROM json_each(?))`, string(list))
	if err != nil {
		return nil, err
	}
	defer q.Close()
	for q.Next() {
		var seq, created int64
		var e Event
		if err := q.Scan(&seq, &e.ID, &e.Type, &e.Body, &e.CoalesceKey, &created); err != nil {
			return nil, err
		}
		e.CreatedAt = fromMS(created)
		events[seq] = &e
	}
	if err := q.Err(); err != nil {
		return nil, err
	}
	out := make([]Claimed, 0, len(rows))
	for _, r := range rows {
		sub, ev, c := bySub[r.subID], events[r.eventSeq], byID[r.subID]
		if sub == nil || ev == nil || c == nil {
			return nil, fmt.Errorf("claim: delivery %d lost its subscriber or event", r.seq)
		}
		out = append(out, Claimed{Seq: r.seq, DeliveryID: s.DeliveryID(r.seq), LeaseToken: token, Attempts: r.attempts,
			AgeFrom: fromMS(max(r.ageFrom, c.resumedAt)), CoalesceKey: r.coalesceKey, Event: *ev, Subscriber: sub, Probe: c.probe,
			LeaseExpires: fromMS(leaseUntil)})
	}
	return out, nil
}
