package harness_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// slowUpstream answers 200 after delay, or fails as a timeout when ctx ends first (as
// httpupstream does when the context it is given expires).
type slowUpstream struct{ delay time.Duration }

func (s slowUpstream) Do(ctx context.Context, _ *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
	select {
	case <-time.After(s.delay):
		return &relay.UpstreamResponse{Status: 200, Header: relay.Header{}}, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %v", relay.ErrUpstreamTimeout, ctx.Err())
	}
}

// docs/PROTOCOL.md §5: upstream_timeout means the subscriber's status did not arrive within its
// timeout_ms. A request that had to wait for a free instance must still give its subscriber that
// time: here the subscriber answers in 1.2 s, within its 1.5 s, and the call timeout (2 s) is
// longer than the subscriber's timeout, yet the second request, queued behind the first for
// 1.2 s, has its forward cut after 0.8 s and the subscriber is blamed.
func TestAQueuedRequestGivesItsSubscriberItsWholeTimeout(t *testing.T) {
	e := newHost(t, slowUpstream{delay: 1200 * time.Millisecond}, 1, 2*time.Second)
	entry, err := wire.SubscriberEntry("sub_slow", &wire.SubscriberRecord{URL: "http://127.0.0.1:1/unused", TimeoutMS: 1500, Active: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = e.subscribers.Put(context.Background(), entry.Key, entry.Value, 0)
	resps := make([]*relay.Response, 2)
	var wg sync.WaitGroup
	for i := range resps {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 100 * time.Millisecond) // the second arrives while the first is in the instance
			resps[i] = e.host.Handle(context.Background(), signedRequest(fmt.Sprintf("del_wait_%d", i), "sub_slow", []byte("{}"), time.Now()))
		})
	}
	wg.Wait()
	for i, resp := range resps {
		if resp.Status != 200 || outcome(resp) != string(wire.OutcomeForwarded) {
			t.Errorf("request %d: %d %q (%s), want 200 forwarded: the subscriber answered within its timeout_ms", i, resp.Status, outcome(resp), resp.Detail)
		}
	}
}
