package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/edgehook/edgehook/shared/wire"
)

// TestARandomWorkloadKeepsTheQueueConsistent runs seeded random sequences of the store's
// operations on one database — emits (coalesced or not), claims, settles of every result with
// subscriber effects (410, Retry-After, circuit), pauses, disables, resumes, deletes and
// re-creations of an id, filter and coalescing changes, replays, prunes, leases left to expire,
// the clock moving back a little — and checks along the way that queue_counts matches the
// deliveries (checkCounts), that a disabled subscriber has none pending and an active one none
// held; at the end, with every subscriber resumed and everything claimed delivered, that no
// delivery is left pending, in flight or held.
func TestARandomWorkloadKeepsTheQueueConsistent(t *testing.T) {
	t.Parallel()
	for seed := uint64(10); seed < 22; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			ctx := context.Background()
			s, clk := open(t, Options{BacklogCap: 15})
			rng := rand.New(rand.NewPCG(seed, 7))
			rule := &wire.CoalesceRule{EventTypes: []string{"rank"}, Key: "k", WindowSeconds: 10}
			ids := []string{"a", "b", "c", "d"}
			exists := map[string]bool{}
			create := func(id string) {
				in := SubscriberInput{ID: id, URL: "https://example.com/h", Events: []string{"*"}, RatePerSec: 50, Burst: 5, MaxInFlight: 4}
				if rng.IntN(2) == 0 {
					in.Coalesce = rule
				}
				if rng.IntN(3) == 0 {
					in.Events = []string{"rank"}
				}
				if _, err := s.CreateSubscriber(ctx, in); err != nil {
					t.Fatal(err)
				}
				exists[id] = true
			}
			for _, id := range ids {
				create(id)
			}
			var inflight []Claimed
			ev := 0
			pol := CircuitPolicy{Threshold: 2, BaseCooldown: time.Second, MaxCooldown: 5 * time.Second}
			for step := 0; step < 300; step++ {
				id := ids[rng.IntN(len(ids))]
				switch op := rng.IntN(14); op {
				case 0, 1, 2:
					ev++
					typ := []string{"rank", "other"}[rng.IntN(2)]
					mustEmit(t, s, fmt.Sprintf("e%d", ev), typ, fmt.Sprintf(`{"k":"%d"}`, rng.IntN(3)))
				case 3, 4:
					res, err := s.Claim(ctx, ClaimParams{Now: clk.Now(), Limit: 1 + rng.IntN(8), LeaseDuration: 10 * time.Second})
					if err != nil {
						t.Fatal(err)
					}
					inflight = append(inflight, res.Deliveries...)
				case 5, 6:
					if len(inflight) == 0 {
						continue
					}
					k := 1 + rng.IntN(len(inflight))
					var items []Settlement
					seen := map[int64]bool{}
					var rest []Claimed
					for _, c := range inflight[:k] {
						if seen[c.Seq] {
							rest = append(rest, c)
							continue
						}
						seen[c.Seq] = true
						it := done(c, Result(1+rng.IntN(6)))
						it.NextAttemptAt = clk.Now().Add(time.Duration(rng.IntN(3)) * time.Second)
						if it.Result == ResultDead || it.Result == ResultDeadUnsent {
							it.Reason = ReasonMaxAttempts
						}
						switch rng.IntN(6) {
						case 0:
							it.Circuit = CircuitFailure
						case 1:
							it.Circuit = CircuitSuccess
						case 2:
							if it.Result == ResultRetry {
								it.Disable = "410"
							}
						case 3:
							it.PauseUntil = clk.Now().Add(time.Second)
						}
						it.Attempt = &Attempt{At: clk.Now(), Status: 500}
						items = append(items, it)
					}
					inflight = append(rest, inflight[k:]...)
					if _, err := s.Settle(ctx, clk.Now(), pol, items); err != nil {
						t.Fatal(err)
					}
				case 7:
					if exists[id] {
						state := []State{StatePaused, StateActive, StateDisabled}[rng.IntN(3)]
						if _, err := s.setState(ctx, id, state, "test"); err != nil {
							t.Fatal(err)
						}
					}
				case 8:
					if exists[id] && rng.IntN(3) == 0 {
						if err := s.DeleteSubscriber(ctx, id); err != nil {
							t.Fatal(err)
						}
						exists[id] = false
					} else if !exists[id] {
						create(id)
					}
				case 9:
					clk.Advance(time.Duration(rng.IntN(15)) * time.Second)
				case 10:
					if exists[id] {
						ev := []string{"*"}
						if rng.IntN(2) == 0 {
							ev = []string{"other"}
						}
						var co *wire.CoalesceRule
						if rng.IntN(2) == 0 {
							co = rule
						}
						if _, err := s.UpdateSubscriber(ctx, id, SubscriberPatch{Events: &ev, Coalesce: &co}); err != nil {
							t.Fatal(err)
						}
					}
				case 11:
					if exists[id] {
						if _, err := s.ReplayDead(ctx, id, time.Time{}, time.Time{}, clk.Now()); err != nil {
							t.Fatal(err)
						}
					}
				case 12:
					if _, err := s.Prune(ctx, clk.Now().Add(-30*time.Second)); err != nil {
						t.Fatal(err)
					}
				case 13:
					if rng.IntN(4) == 0 {
						clk.Advance(-time.Duration(rng.IntN(5)) * time.Second)
					}
				}
				if step%10 == 0 {
					checkCounts(t, s)
					if n := countRows(t, s, `SELECT count(*) FROM all_deliveries d JOIN subscribers s ON s.id = d.subscriber_id
						WHERE d.status = 'held' AND s.state = 'active' OR d.status = 'pending' AND s.state = 'disabled'`); n > 0 {
						t.Fatalf("step %d: %d deliveries held for an active subscriber or pending for a disabled one", step, n)
					}
				}
			}
			// Everything ends: resume every subscriber, then deliver what is claimed (a delivery
			// claimed again after its lease expired settles stale once) until nothing is due.
			for _, id := range ids {
				if _, err := s.ResumeSubscriber(ctx, id); exists[id] && err != nil {
					t.Fatal(err)
				}
			}
			for round := 0; round < 200; round++ {
				clk.Advance(20 * time.Second)
				res := claim(t, s, clk.Now(), 100)
				for _, c := range append(inflight, res.Deliveries...) {
					settle(t, s, clk.Now(), done(c, ResultDelivered))
				}
				inflight = nil
				if len(res.Deliveries) == 0 && !res.Waiting {
					break
				}
			}
			rows, err := s.r.Query(`SELECT subscriber_id, status, count(*) FROM all_deliveries WHERE status IN ('pending', 'leased', 'held') GROUP BY 1, 2`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var sub, st string
				var n int
				if err := rows.Scan(&sub, &st, &n); err != nil {
					t.Fatal(err)
				}
				t.Errorf("left %d %s of %s", n, st, sub)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
