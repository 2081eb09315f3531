package store

import (
	"context"
	"testing"
	"time"
)

// statsOf returns a's stats at now.
func statsOf(t *testing.T, s *Store, now time.Time, id string) SubscriberStats {
	t.Helper()
	st, err := s.Stats(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	for _, ss := range st.Subscribers {
		if ss.SubscriberID == id {
			return ss
		}
	}
	t.Fatalf("no stats for %s", id)
	return SubscriberStats{}
}

// TestDeliveredLastMinuteAfterTheClockWentBack: three deliveries are acknowledged, then the clock
// is set back an hour (a wrong clock fixed) and ten minutes pass with nothing delivered. "Delivered
// in the last minute" must not keep reporting the three for the next hour: a subscriber that
// stopped receiving would look healthy.
func TestDeliveredLastMinuteAfterTheClockWentBack(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	emitN(t, s, "x", 3)
	var items []Settlement
	for _, c := range claim(t, s, clk.Now(), 3).Deliveries {
		items = append(items, done(c, ResultDelivered))
	}
	settle(t, s, clk.Now(), items...)
	if got := statsOf(t, s, clk.Now(), "a").DeliveredLast; got != 3 {
		t.Fatalf("delivered in the last minute %d, want 3", got)
	}
	clk.Advance(-time.Hour)
	clk.Advance(10 * time.Minute)
	if got := statsOf(t, s, clk.Now(), "a").DeliveredLast; got != 0 {
		t.Fatalf("ten minutes after the clock went back an hour, with nothing delivered since, "+
			"delivered in the last minute is %d, want 0", got)
	}
}
