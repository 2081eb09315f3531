package store

import (
	"context"
	"testing"
	"time"
)

// TestAResumeRestartsTheMaxAgeOfWhatWaited: a claim counts a delivery's max age (Claimed.AgeFrom)
// from its subscriber's last resume from a pause, if later than its own start: a retry (a row) and
// a first attempt emitted during the pause (no row: a fanout range) alike. A delivery emitted
// after the resume, and a resume of a subscriber that was active, keep their own ages.
func TestAResumeRestartsTheMaxAgeOfWhatWaited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	mustEmit(t, s, "e1", "x.t", `{}`)
	c := claim(t, s, clk.Now(), 1).Deliveries[0]
	settle(t, s, clk.Now(), Settlement{Seq: c.Seq, LeaseToken: c.LeaseToken, SubscriberID: "a", Result: ResultRetry,
		NextAttemptAt: clk.Now(), Attempt: &Attempt{At: clk.Now(), Status: 500}})
	if _, err := s.PauseSubscriber(ctx, "a", "maintenance"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	mustEmit(t, s, "e2", "x.t", `{}`)
	clk.Advance(time.Hour)
	if _, err := s.ResumeSubscriber(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	resumed := clk.Now()
	clk.Advance(time.Minute)
	mustEmit(t, s, "e3", "x.t", `{}`)
	emitted := clk.Now()
	clk.Advance(time.Minute)
	if _, err := s.ResumeSubscriber(ctx, "a"); err != nil { // active already: no hold to make up for
		t.Fatal(err)
	}
	want := map[string]time.Time{"e1": resumed, "e2": resumed, "e3": emitted}
	got := claim(t, s, clk.Now(), 10).Deliveries
	for _, c := range got {
		if !c.AgeFrom.Equal(want[c.Event.ID]) {
			t.Errorf("%s (%d attempts before): max age from %s, want %s", c.Event.ID, c.Attempts, c.AgeFrom, want[c.Event.ID])
		}
	}
	if len(got) != len(want) {
		t.Errorf("claimed %d, want %d", len(got), len(want))
	}
}
