package store

import (
	"fmt"
	"testing"
	"time"
)

// TestClaimBudgetDoesNotStarveALargeRetryBehindItsSubscribersFirstAttempts (from a review of
// the body budget): a subscriber whose large body failed once (a retry) keeps receiving small
// events. Stopping at the first body that does not fit, and a claimer holding nothing taking any
// body, were to keep a large body from being passed over for good; but within one subscriber the
// claim took its first attempts before its retries, so whenever a small event was due the large
// retry was never the first delivery of a claim holding nothing, for as long as the stream lasted
// (in a daemon, until the retry died at --max-age).
func TestClaimBudgetDoesNotStarveALargeRetryBehindItsSubscribersFirstAttempts(t *testing.T) {
	t.Parallel()
	s, clk := dueRetry(t, 5000)
	var took []string
	for i := range 10 {
		// One small event a round: a steady, light stream.
		mustEmit(t, s, fmt.Sprintf("small-%d", i), "t", sizedBody(100))
		clk.Advance(time.Second)
		res := claimWithin(t, s, clk.Now(), 4000, 0) // the engine holds nothing: every send is done
		took = append(took, "["+eventIDs(res)+"]")
		for _, d := range res.Deliveries {
			if d.Event.ID == "large" {
				return
			}
			settle(t, s, clk.Now(), done(d, ResultDelivered))
		}
	}
	t.Fatalf("in 10 claims holding nothing (budget 4000 bytes), the due 5000-byte retry was never taken: claims took %v", took)
}

// TestClaimBudgetDoesNotStarveARetryThatFits: the same with a retry that fits in the budget (3000
// of 4000 bytes): each claim took the subscriber's new small first attempts before it, and the
// engine claims again once as many bytes as the retry wants are free, which the next small
// events then took first.
func TestClaimBudgetDoesNotStarveARetryThatFits(t *testing.T) {
	t.Parallel()
	s, clk := dueRetry(t, 3000)
	n := 0
	emit := func() {
		mustEmit(t, s, fmt.Sprintf("small-%d", n), "t", sizedBody(1000))
		n++
	}
	emit()
	emit()
	var inFlight []Claimed
	var took []string
	for range 10 {
		var held int64
		for _, d := range inFlight {
			held += int64(len(d.Event.Body))
		}
		res := claimWithin(t, s, clk.Now(), 4000, held)
		took = append(took, fmt.Sprintf("held %d: [%s] wants %d", held, eventIDs(res), res.WantBytes))
		for _, d := range res.Deliveries {
			if d.Event.ID == "large" {
				return
			}
		}
		inFlight = append(inFlight, res.Deliveries...)
		// As the engine does: it claims again once the bytes wanted are free. One send ends
		// (its bytes given back), and one more small event came meanwhile.
		settle(t, s, clk.Now(), done(inFlight[0], ResultDelivered))
		inFlight = inFlight[1:]
		emit()
		clk.Advance(time.Second)
	}
	t.Fatalf("in 10 claims the due 3000-byte retry (budget 4000) was never taken: %v", took)
}

// dueRetry returns a store whose subscriber a has one delivery, of an event with a body of size
// bytes, failed once and due again.
func dueRetry(t *testing.T, size int) (*Store, *clock) {
	t.Helper()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	mustEmit(t, s, "large", "t", sizedBody(size))
	c := claim(t, s, clk.Now(), 10).Deliveries[0]
	settle(t, s, clk.Now(), Settlement{Seq: c.Seq, LeaseToken: c.LeaseToken, SubscriberID: "a", Result: ResultRetry,
		NextAttemptAt: clk.Now().Add(30 * time.Second)})
	clk.Advance(31 * time.Second)
	return s, clk
}
